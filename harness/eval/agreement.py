"""Long-distance agreement, scored on contrastive pairs (§4's argument from path lengths, measured).

§4 argues that self-attention learns long-range dependencies more easily than recurrence or convolution,
because the path between two positions is shorter. Sennrich (2017, Lingeval97) tests a translation model on
such a dependency without decoding: the model scores the reference and the same reference with one agreeing
word in the wrong form (forced decoding), and is right when it prefers the reference. Tang et al. (2018)
scored the three families this way on subject-verb agreement, by the distance between the two words.

The made-up corpus knows every agreement it writes (harness/data/synth/probes.py `agreement_pairs`): the target
verb agrees with its subject's head noun or pronoun, or, in a subject relative clause, with the antecedent,
in number and gender (the German-like target) or in number (the French-like one). The pairs come from
sentences of the trial's own corpus settings, from a random stream none of train, dev and test use.

Accuracy is reported by the distance in target words between the controller and the agreeing word, in
BUCKETS; "long" is every pair at least LONG_FROM words apart. Both were fixed before any model was scored:
distances 1 to 3 are the adjacent and near ones (a noun and its verb, an adjective or adverb between), 4 and
up need the model to carry the subject's features over a phrase or a clause.

    python -m harness probe agreement RUN_DIR [--sentences 2000]
"""

from __future__ import annotations

import math

import torch

from harness.data.batching import ParallelData, token_batches
from harness.data.bpe import PAD, Tokenizer
from harness.data.corpus import DataConfig
from harness.errors import UserError

BUCKETS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 8), (9, None))   # target words apart, inclusive
LONG_FROM = 4


def bucket_name(lo: int, hi: int | None) -> str:
    return f"d{lo}" if hi == lo else f"d{lo}p" if hi is None else f"d{lo}_{hi}"


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}" if hi == lo else f"{lo}+" if hi is None else f"{lo}-{hi}"


def check_agreement_data(data_cfg: DataConfig) -> None:
    if data_cfg.name != "synth" or data_cfg.task != "translate":
        raise UserError(f"the agreement probe needs the made-up corpus's translation task (data.name synth), not "
                        f"{data_cfg.name!r} ({data_cfg.task}): only its generator knows which words agree.")


def contrastive_pairs(data_cfg: DataConfig, n_sentences: int):
    """The contrastive pairs of the made-up corpus `data_cfg` names (its grammar, lexicon and seed)."""
    from harness.data.synth import agreement_pairs, synth_config
    check_agreement_data(data_cfg)
    return agreement_pairs(n_sentences, data_cfg.seed, synth_config(data_cfg))


@torch.no_grad()
def sequence_logprobs(model, src_ids: list[list[int]], tgt_ids: list[list[int]], device: torch.device,
                      max_tokens: int, autocast) -> list[float]:
    """log p(tgt | src) of each encoded pair under the model, EOS included: teacher-forced (forced decoding)."""
    model.eval()
    data = ParallelData(src_ids, tgt_ids)
    out = [0.0] * len(src_ids)
    for index in token_batches(data.src_lens, data.tgt_lens, max_tokens):
        b = data.collate(index).to(device)
        with autocast():
            h = model.hidden(b.src, b.tgt_in)
            logits = model.out_proj(h)
        logp = torch.log_softmax(logits.float(), -1).gather(-1, b.tgt_out[..., None]).squeeze(-1)
        logp = logp.masked_fill(b.tgt_out == PAD, 0.0).sum(-1)
        for i, v in zip(index.tolist(), logp.tolist()):
            out[i] = v
    return out


def score_pairs(model, tokenizer: Tokenizer, pairs, device: torch.device, max_tokens: int, autocast,
                max_len: int) -> tuple[list, list[bool]]:
    """The pairs that fit the model's length (both sides shorter than max_len pieces) and, for each, whether
    the model gives the reference a higher probability than the contrast (a tie counts as wrong)."""
    fits = lambda s: len(s) < max_len  # noqa: E731
    src_ids, ref_ids, alt_ids = (tokenizer.encode([getattr(p, k) for p in pairs]) for k in ("src", "ref", "alt"))
    kept = [i for i in range(len(pairs)) if fits(src_ids[i]) and fits(ref_ids[i]) and fits(alt_ids[i])]
    src = [src_ids[i] for i in kept]
    ref = sequence_logprobs(model, src, [ref_ids[i] for i in kept], device, max_tokens, autocast)
    alt = sequence_logprobs(model, src, [alt_ids[i] for i in kept], device, max_tokens, autocast)
    return [pairs[i] for i in kept], [r > a for r, a in zip(ref, alt)]


def summarize(pairs, correct: list[bool]) -> dict:
    """agree_pairs, agree_acc (%), agree_acc_long and agree_n_long (pairs >= LONG_FROM words apart), per
    bucket agree_acc_<bucket> and agree_n_<bucket>, per feature agree_acc_<feature> and agree_n_<feature>."""
    def acc(sel):
        hits = [c for p, c in zip(pairs, correct) if sel(p)]
        return (100.0 * sum(hits) / len(hits) if hits else float("nan")), len(hits)

    out = {}
    out["agree_acc"], out["agree_pairs"] = acc(lambda p: True)
    out["agree_acc_long"], out["agree_n_long"] = acc(lambda p: abs(p.distance) >= LONG_FROM)
    for lo, hi in BUCKETS:
        name = bucket_name(lo, hi)
        out[f"agree_acc_{name}"], out[f"agree_n_{name}"] = \
            acc(lambda p, lo=lo, hi=hi: lo <= abs(p.distance) and (hi is None or abs(p.distance) <= hi))
    for feature in sorted({p.feature for p in pairs}):
        out[f"agree_acc_{feature}"], out[f"agree_n_{feature}"] = acc(lambda p, f=feature: p.feature == f)
    return out


def agreement_metrics(model, tokenizer: Tokenizer, data_cfg: DataConfig, n_sentences: int, device: torch.device,
                      max_tokens: int, autocast) -> dict:
    """The probe's metrics for a trained model on its own corpus (summarize's keys)."""
    pairs = contrastive_pairs(data_cfg, n_sentences)
    pairs, correct = score_pairs(model, tokenizer, pairs, device, max_tokens, autocast, model.cfg.max_len)
    return summarize(pairs, correct)


def wilson(acc_percent: float, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of an accuracy (in %) over n pairs."""
    if not n or math.isnan(acc_percent):
        return float("nan"), float("nan")
    p, z = acc_percent / 100.0, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100.0 * (centre - half), 100.0 * (centre + half)
