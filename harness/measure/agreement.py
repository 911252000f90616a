"""§4's long-range argument, measured on the made-up corpus (harness/eval/agreement.py): on the final weights,
the subject-verb agreements of `train.agreement_sentences` sentences scored as contrastive pairs, logged as
agree_* metrics. `python -m harness probe agreement RUN_DIR` takes it on a finished run."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # sentences whose agreements are scored (0: not measured)


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.eval.agreement import check_agreement_data
    check_agreement_data(data_cfg)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.agreement import agreement_metrics
    return agreement_metrics(ctx.model, ctx.tokenizer, ctx.data_cfg, s.sentences, ctx.device,
                             ctx.train.max_tokens, ctx.autocast)


def _section(ctx: SectionContext):
    from harness.report.rivals import agreement_section
    lines, plot = agreement_section(ctx.runs, ctx.rows, ctx.out_dir / f"{ctx.study}_agreement.png")
    return (["", *lines, f"![{plot.stem}]({plot.name})", ""], [plot]) if lines else ([], [])


register(Measurement(
    "agreement", Settings, "§4: subject-verb agreement scored as contrastive pairs, by distance (made-up corpus)",
    metrics=(Metric("agree_acc", "higher", "agreement accuracy (%)"),
             Metric("agree_acc_long", "higher", "agreement accuracy, pairs at least 4 words apart (%)",
                    claim="agree_long"),
             Metric("agree_pairs", "", "contrastive pairs")),
    check=_check, at_end=_measure, section=_section, section_rank=60))
