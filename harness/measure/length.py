"""§3.5's length extrapolation on the made-up corpus: on the final weights, `train.length_sentences` sentences of
each source-length bucket from 1 to 3 x data.max_words words (harness/eval/extrapolation.py), logged as len_b*
metrics."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # sentences scored in each length bucket (0: not measured)


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.eval.extrapolation import check_length_data
    check_length_data(data_cfg)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.extrapolation import length_metrics
    t = ctx.train
    return length_metrics(ctx.model, ctx.tokenizer, ctx.data_cfg, s.sentences, ctx.device, beam_size=t.beam_size,
                          alpha=t.alpha, max_extra=t.max_extra, max_tokens=t.max_tokens, autocast=ctx.autocast,
                          lang=ctx.lang, moses=str(t.bleu_moses))


def _section(ctx: SectionContext):
    from harness.report.extrapolation import length_section
    return length_section(ctx.runs, ctx.rows, ctx.out_dir / f"{ctx.study}_length.png")


register(Measurement(
    "length", Settings, "§3.5: PPL and BLEU by source length, up to 3 x the training lengths (made-up corpus)",
    # the claims read the longest bucket (2.5 to 3 times the training lengths)
    metrics=(Metric("len_b*_ppl", "lower", "PPL in length bucket *"),
             Metric("len_b*_bleu", "higher", "tokenized BLEU in length bucket *"),
             Metric("len_b4_ppl", "lower", "ln PPL, longest bucket", claim="long_nll", transform="log"),
             Metric("len_b4_bleu", "higher", "BLEU, longest bucket", claim="long_bleu")),
    check=_check, at_end=_measure, section=_section, section_rank=20, smoke={"sentences": 4}))
