"""Per-layer gradient norms at initialization (harness/eval/grad_norms.py; Xiong et al. 2020's Figure 3 at our
scale): before the first update, one backward pass over the first `train.grad_norms_sentences` dev pairs, the norm
of each encoder and decoder layer's gradients, logged at step 0 as gradnorm_enc_{i} and gradnorm_dec_{j}."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev pairs in the one backward pass (0: not measured)


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.errors import UserError
    if getattr(model_cfg, "family", "transformer") != "transformer":
        raise UserError("train.grad_norms_sentences reads the encoder's and decoder's layers of the Transformer "
                        "family (model.family transformer only)")


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.grad_norms import layer_grad_norms
    return layer_grad_norms(ctx.model, ctx.dev.data, s.sentences, ctx.device, ctx.train.label_smoothing,
                            ctx.autocast)


def _section(ctx: SectionContext):
    from harness.report.grad_norms import grad_norm_section
    return grad_norm_section(ctx.runs, ctx.rows, ctx.out_dir / f"{ctx.study}_grad_norms.png",
                             ctx.study)


register(Measurement(
    "grad_norms", Settings, "per-layer gradient norms at initialization (Xiong et al. 2020, Figure 3)",
    metrics=(Metric("gradnorm_enc_*", "", "gradient norm at init, encoder layer *"),
             Metric("gradnorm_dec_*", "", "gradient norm at init, decoder layer *")),
    check=_check, at_init=_measure, section=_section, section_rank=15))
