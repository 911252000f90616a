"""RoPE position interpolation (Chen et al. 2023; harness/eval/rope_pi.py): on the final weights of a RoPE model,
`train.rope_pi_steps` fine-tuning updates on sentences of up to `train.rope_pi_factor` x the training length, plainly
and with interpolation, each then scored on §3.5's length buckets (`train.rope_pi_per_bucket` sentences each);
logged as pi_plain_b*, pi_interp_b* and pi_gain_b*_nll (ln PPL plain - interpolated)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    steps: int = 0              # fine-tuning updates each way (0: not measured)
    factor: float = 3.0         # fine-tune on sentences of up to factor x data.max_words; interpolate by it
    sentences: int = 4000       # fine-tuning pairs drawn
    per_bucket: int = 200       # sentences scored in each length bucket


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.errors import UserError
    from harness.eval.extrapolation import check_length_data
    if getattr(model_cfg, "positional", None) != "rope" or getattr(model_cfg, "family", "transformer") != "transformer":
        raise UserError("train.rope_pi_steps interpolates RoPE's positions: it needs model.positional rope (the "
                        "Transformer family)")
    if not s.factor > 1:
        raise UserError(f"train.rope_pi_factor must be above 1 (the longer length over the trained one), got "
                        f"{s.factor}")
    check_length_data(data_cfg)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.rope_pi import pi_metrics
    t = ctx.train
    return pi_metrics(ctx.model, ctx.tokenizer, ctx.data_cfg, steps=s.steps, factor=s.factor, sentences=s.sentences,
                      per_bucket=s.per_bucket, lr=ctx.rate_at(t.steps),    # the run's rate at its last update
                      max_tokens=t.max_tokens, label_smoothing=t.label_smoothing, device=ctx.device,
                      autocast=ctx.autocast, beam_size=t.beam_size, alpha=t.alpha, max_extra=t.max_extra,
                      lang=ctx.lang, moses=str(t.bleu_moses))


def _section(ctx: SectionContext):
    from harness.report.extrapolation import pi_section
    return pi_section(ctx.runs, ctx.rows)


register(Measurement(
    "rope_pi", Settings, "RoPE position interpolation: fine-tuned at a longer length plainly and interpolated",
    # the claim reads the longest bucket (2.5 to 3 times the training lengths)
    metrics=(Metric("pi_plain_b*_ppl", "lower", "PPL after a plain fine-tune, bucket *"),
             Metric("pi_interp_b*_ppl", "lower", "PPL after an interpolated fine-tune, bucket *"),
             Metric("pi_gain_b*_nll", "higher", "ln PPL plain - interpolated, bucket *"),
             Metric("pi_gain_b4_nll", "higher", "ln PPL plain - interpolated, longest bucket", claim="pi_gain_long"),
             Metric("pi_gain_b3_nll", "higher", "ln PPL plain - interpolated, 2 to 2.5 x", claim="pi_gain_2x")),
    check=_check, at_end=_measure, section=_section, section_rank=21,
    smoke={"steps": 2, "sentences": 32, "per_bucket": 4}))
