"""§3.5's conjecture measured: the sinusoids "may allow the model to extrapolate to sequence lengths longer than
the ones encountered during training".

A trial trains on the made-up corpus's sentences of at most L words (`data.max_words`) and is then scored on
sentences of the same grammar and lexicon in BUCKETS of source length from 1 to 3L words (the final "."
counted, as `data.max_words` counts it): the first bucket is the training lengths, the others lie past them.
The sentences come from a random stream none of train, dev and test use (harness/data/synth/probes.py
`length_buckets`), `train.length_sentences` of each bucket. Per bucket: the perplexity of the references
(teacher-forced), BLEU of the beam search's translations (the trial's beam settings; the paper's tokenized BLEU),
and the accuracy on the bucket's agreement contrasts (harness/eval/agreement.py's forced decoding), logged as
`len_b{i}_ppl`, `len_b{i}_bleu`, `len_b{i}_agree` with the bucket's bounds `len_b{i}_lo` and `len_b{i}_hi`.

Learned positions (Table 3 row E) keep an embedding for every position up to `model.max_len`; past the training
lengths those rows were never trained, and the harness uses them as they are (it neither clamps nor refuses);
sinusoids, RoPE and ALiBi compute theirs. A sentence longer than max_len pieces is left out.
"""

from __future__ import annotations

import math

import torch

from harness.data.batching import ParallelData
from harness.data.bpe import Tokenizer
from harness.data.corpus import DataConfig
from harness.errors import UserError
from harness.eval.agreement import score_pairs
from harness.eval.bleu import tokenized_bleu
from harness.eval.evaluate import perplexity, translate

# Source lengths as multiples of the training maximum L: up to L, then steps of L/2 up to 3L (fixed before any
# model was scored).
BUCKETS = ((0.0, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, 2.5), (2.5, 3.0))


def bucket_bounds(max_words: int) -> list[tuple[int, int]]:
    """The word ranges (lo, hi), inclusive, of BUCKETS for training sentences of at most max_words words."""
    return [(int(lo * max_words) + 1, int(hi * max_words)) for lo, hi in BUCKETS]


def check_length_data(data_cfg: DataConfig) -> None:
    if data_cfg.name != "synth" or data_cfg.task != "translate":
        raise UserError(f"length extrapolation (train.length_sentences) needs the made-up corpus's translation task "
                        f"(data.name synth), not {data_cfg.name!r} ({data_cfg.task}): only its grammar draws "
                        "sentences of a chosen length.")


def length_metrics(model, tokenizer: Tokenizer, data_cfg: DataConfig, per_bucket: int, device: torch.device,
                   *, beam_size: int, alpha: float, max_extra: int, max_tokens: int, autocast, lang: str = "de",
                   moses: str = "2025") -> dict:
    """The len_b* metrics of a trained model on its own corpus's grammar (the module's docstring)."""
    from harness.data.synth import length_buckets, synth_config
    check_length_data(data_cfg)
    out: dict[str, float] = {}
    buckets = length_buckets(per_bucket, data_cfg.seed, synth_config(data_cfg), bucket_bounds(data_cfg.max_words))
    limit = model.cfg.max_len
    for i, bucket in enumerate(buckets):
        src, tgt = tokenizer.encode(bucket.src), tokenizer.encode(bucket.tgt)
        # Room for EOS (and BOS) within max_len, and for the beam's extra steps past the source's length.
        kept = [j for j in range(len(src)) if len(src[j]) + 1 < limit and len(tgt[j]) + 1 < limit]
        out[f"len_b{i}_lo"], out[f"len_b{i}_hi"], out[f"len_b{i}_n"] = bucket.lo, bucket.hi, len(kept)
        if not kept:
            out.update({f"len_b{i}_{k}": float("nan") for k in ("ppl", "bleu", "agree")})
            continue
        data = ParallelData([src[j] for j in kept], [tgt[j] for j in kept])
        out[f"len_b{i}_ppl"] = perplexity(model, data, max_tokens, device, autocast)
        hyps = translate(model, tokenizer, data, device, beam_size=beam_size, alpha=alpha, max_extra=max_extra,
                         max_tokens=max_tokens, autocast=autocast)
        out[f"len_b{i}_bleu"] = tokenized_bleu(hyps, [bucket.tgt[j] for j in kept], lang=lang, moses=moses).score
        pairs, correct = score_pairs(model, tokenizer, bucket.contrasts, device, max_tokens, autocast, limit)
        out[f"len_b{i}_agree"] = 100.0 * sum(correct) / len(correct) if correct else math.nan
    return out
