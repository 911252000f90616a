"""§3.2.1's softmax saturation, measured (harness/eval/attention_stats.py): before the first update, at every dev
evaluation and on the final weights, the attention logits' variance, the largest attention probability, the
entropy and the gradient norm of W^Q and W^K over the first `train.attention_stats_sentences` dev sentences as
one batch, logged as attn_* metrics (an encoder-decoder only)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev sentences measured as one batch (0: not measured)


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.attention_stats import dev_attention_statistics
    return dev_attention_statistics(ctx.model, ctx.dev.data, s.sentences, ctx.device, ctx.train.label_smoothing)


def _section(ctx: SectionContext):
    from harness.report.attention_stats import attention_stats_section
    return attention_stats_section(ctx.runs, ctx.rows, ctx.uri, ctx.out_dir / f"{ctx.study}_attention_stats.png")


register(Measurement(
    "attention_stats", Settings, "§3.2.1: the attention logits' variance, softmax saturation and W^Q,K gradients",
    metrics=(Metric("attn_logit_var", "", "logit var"), Metric("attn_max_prob", "", "max prob"),
             Metric("attn_entropy_ratio", "", "entropy / ln keys"), Metric("attn_qk_grad_norm", "", "‖∇W^Q,K‖")),
    at_init=_measure, at_eval=_measure, at_end=_measure, section=_section, section_rank=30))
