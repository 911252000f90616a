"""A quality curve beside the dev PPL: at every dev evaluation and at the last step, greedy-decode the first
`train.curve_bleu_sentences` dev sentences and log their tokenized BLEU (curve_bleu) with the target tokens and
seconds trained so far (curve_tokens, curve_seconds): dev BLEU against training FLOPs and wall time."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev sentences greedy-decoded at each point (0: no curve)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.data.batching import ParallelData
    from harness.eval.bleu import tokenized_bleu
    from harness.eval.evaluate import translate
    n = min(s.sentences, len(ctx.dev.data))
    subset = ParallelData(ctx.dev.data.src_ids[:n], ctx.dev.data.tgt_ids[:n])
    hyps = translate(ctx.model, ctx.tokenizer, subset, ctx.device, beam_size=1, alpha=ctx.train.alpha,
                     max_extra=ctx.train.max_extra, max_tokens=ctx.train.max_tokens, autocast=ctx.autocast)
    bleu = tokenized_bleu(hyps, ctx.dev.tgt_text[:n], lang=ctx.lang, moses=str(ctx.train.bleu_moses)).score
    return {"curve_bleu": bleu, "curve_tokens": ctx.clock["tokens_seen"], "curve_seconds": ctx.clock["train_seconds"]}


def _section(ctx: SectionContext):
    from harness.report.claim_kinds.registry import kind_of
    from harness.report.rivals import compute_section
    from harness.report.verdicts import claims_for
    # the first claim that races the base's curve against its rivals' (a kind that reads the curves)
    sooner = next(((c.a, tuple(c.b)) for c in claims_for(ctx.study) if kind_of(c.expect).reads_curves), None)
    lines, plot = compute_section(ctx.runs, ctx.uri, ctx.rows, ctx.out_dir / f"{ctx.study}_bleu_vs_compute.png",
                                  sooner)
    return (["", *lines, f"![{plot.stem}]({plot.name})", ""], [plot]) if lines else ([], [])


register(Measurement(
    "curve_bleu", Settings, "a greedy dev BLEU curve against training FLOPs and wall time",
    metrics=(Metric("curve_bleu", "higher", "greedy dev BLEU tok"), Metric("curve_tokens", "", "target tokens seen"),
             Metric("curve_seconds", "", "training seconds")),
    at_eval=_measure, eval_at_last=True, section=_section, section_rank=50))
