"""How much each target position's attention reads the source, by position, on the final weights over the first
`train.source_attention_sentences` dev sentences (harness/eval/source_attention.py: Fu et al. 2023's attention
degeneration), logged as src_contrib_pT and, for the decoder-only family, src_mass_pT."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev sentences measured (0: not measured)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.source_attention import source_attention_metrics
    return source_attention_metrics(ctx.model, ctx.dev.data, s.sentences, ctx.device, ctx.train.max_tokens)


def _section(ctx: SectionContext):
    from harness.report.source_attention import source_attention_section
    return source_attention_section(ctx.runs, ctx.rows, ctx.out_dir / f"{ctx.study}_source_attention.png")


register(Measurement(
    "source_attention", Settings, "the source's share of what attention adds, by target position (Fu et al. 2023)",
    # a claim reads how far the source's share falls from the first target positions to the later ones, per run
    # (harness/report/shares.py's fade of the src_contrib_pT metrics; > 0: the source fades)
    metrics=(Metric("src_contrib_p*", "", "source share of attention's contribution at target position *"),
             Metric("src_mass_p*", "", "attention mass on the source at target position * (decoder-only)"),
             Metric("src_contrib_fade", "higher", "source share fade", claim="src_contrib_fade", transform="fade",
                    claim_key="contrib")),
    at_end=_measure, section=_section, section_rank=40))
