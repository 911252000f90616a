"""Dev/test evaluation: perplexity per subword without label smoothing, and BLEU both ways (sacreBLEU on
detokenized output with its signature; the paper's tokenized, compound-split multi-bleu)."""

from __future__ import annotations

import math

import torch

from harness.data.batching import ParallelData, token_batches
from harness.data.bpe import BOS, EOS, Tokenizer
from harness.eval.bleu import copy_baseline_bleu, sacre_bleu, tokenized_bleu, tokenized_lc_bleu
from harness.eval.parse import TreeConstraint, parse_scores
from model import Seq2SeqModel, beam_search


@torch.no_grad()
def perplexity(model: Seq2SeqModel, data: ParallelData, max_tokens: int, device: torch.device,
               autocast=None) -> float:
    """exp(mean NLL per target subword, EOS included), label smoothing off: the paper's PPL (dev)."""
    model.eval()
    nll, count = 0.0, 0
    for index in token_batches(data.src_lens, data.tgt_lens, max_tokens):
        b = data.collate(index).to(device)
        with autocast():
            _, batch_nll, n = model.loss(b.src, b.tgt_in, b.tgt_out, label_smoothing=0.0)
        nll += float(batch_nll)
        count += n
    return math.exp(nll / max(count, 1))


@torch.no_grad()
def translate(model: Seq2SeqModel, tokenizer: Tokenizer, data: ParallelData, device: torch.device,
              beam_size: int = 4, alpha: float = 0.6, max_extra: int = 50, max_tokens: int = 4000,
              autocast=None, constraint_for=None) -> list[str]:
    """Beam-search translations of every source sentence, in the data's order (§6.1 settings by default).
    constraint_for(indices) -> a beam-search constraint for those sentences (Table 4's tree constraint)."""
    model.eval()
    out: list[list[int]] = [[] for _ in range(len(data))]
    # Batches of sources of similar length; the budget counts beams, which multiply the decoder's rows.
    budget = max(max_tokens // max(beam_size, 1), 1)
    for index in token_batches(data.src_lens, data.src_lens, budget):
        b = data.collate(index).to(device)
        with autocast():
            constraint = constraint_for(index.tolist()) if constraint_for else None
            hyps = beam_search(model, b.src, BOS, EOS, beam_size=beam_size, alpha=alpha, max_extra=max_extra,
                               constraint=constraint)
        for i, h in zip(index.tolist(), hyps):
            out[i] = h
    return tokenizer.decode(out)


def evaluate(model: Seq2SeqModel, tokenizer: Tokenizer, split, device: torch.device, *, prefix: str,
             beam_size: int, alpha: float, max_extra: int, max_tokens: int, bleu_sentences: int | None,
             autocast, constrained: bool = False, lang: str = "de", moses: str = "2025",
             tokenized: bool = False) -> tuple[dict, list[str]]:
    """Metrics for one split, keyed `{prefix}_ppl`, `{prefix}_bleu` (sacreBLEU), `{prefix}_bleu_tok` (paper),
    `{prefix}_bleu_tok_lc` (the same lowercased: Multi30K's literature).
    Parsing: `{prefix}_f1` and EVALB's other scores, from the paper's unconstrained beam search plus repair;
    with `constrained`, the same sentences decoded again under the tree constraint, `{prefix}_*_constrained`.
    `lang` is the target language whose Moses rules (of version `moses`: 2025, or the paper's 2017) tokenize
    both sides for `{prefix}_bleu_tok` (de, fr). `tokenized`: the text is Multi30K's lc.norm.tok form already
    (`data prepare multi30k --form lc.norm.tok`): only `{prefix}_bleu_tok_lc` is scored, on the text as it is
    (sacreBLEU and the paper's BLEU are defined on untokenized text)."""
    metrics = {f"{prefix}_ppl": perplexity(model, split.data, max_tokens, device, autocast)}
    n = len(split.data) if bleu_sentences is None else min(bleu_sentences, len(split.data))
    if n:
        subset = ParallelData(split.data.src_ids[:n], split.data.tgt_ids[:n])
        hyps = translate(model, tokenizer, subset, device, beam_size, alpha, max_extra, max_tokens, autocast)
        refs, srcs = split.tgt_text[:n], split.src_text[:n]
        if split.trees is not None:       # parsing (Table 4): bracketing F1 as EVALB computes it
            scores, trees = parse_scores(hyps, srcs, split.trees[:n])
            metrics.update({f"{prefix}_{k}": v for k, v in scores.items()})
            metrics[f"{prefix}_parsed_sentences"] = n
            if constrained:
                pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
                words = [len(s.split()) for s in srcs]
                first = TreeConstraint(pieces, EOS, [words[0]], beam_size, device)
                make = lambda idx: TreeConstraint(first.vocab_info, EOS, [words[i] for i in idx], beam_size, device)  # noqa: E731
                if first.usable:
                    held = translate(model, tokenizer, subset, device, beam_size, alpha, max_extra, max_tokens,
                                     autocast, constraint_for=make)
                    scores, _ = parse_scores(held, srcs, split.trees[:n])
                    metrics.update({f"{prefix}_{k}_constrained": v for k, v in scores.items()})
            return metrics, trees
        if tokenized:
            lc = tokenized_lc_bleu(hyps, refs, lang=lang, tokenized=True)
            metrics.update({f"{prefix}_bleu_tok_lc": lc.score, f"{prefix}_bleu_tok_lc_parts": str(lc),
                            f"{prefix}_bleu_sentences": n})
            return metrics, hyps
        score, signature = sacre_bleu(hyps, refs)
        tok = tokenized_bleu(hyps, refs, lang=lang, moses=moses)
        # tok's parts as multi-bleu.perl prints them (a string: an MLflow tag beside sacreBLEU's signature),
        # so that a reader sees where the two BLEU figures part (precisions, brevity penalty, lengths)
        # Multi30K's literature scores lowercased tokenized text ("BLEU tok lc"): cheap, so every run has it
        metrics[f"{prefix}_bleu_tok_lc"] = tokenized_lc_bleu(hyps, refs, lang=lang, moses=moses).score
        metrics.update({f"{prefix}_bleu": score, f"{prefix}_bleu_tok": tok.score,
                        f"{prefix}_bleu_tok_parts": str(tok),
                        f"{prefix}_bleu_copy_source": copy_baseline_bleu(srcs, refs)[0],
                        f"{prefix}_bleu_sentences": n, "sacrebleu_signature": signature})
    else:
        hyps = []
    return metrics, hyps
