"""The metrics a run logs that tables, views and claims read, each said once: its MLflow name, its direction, how
a table names it, and the claims.yaml keys that read it. The measurements' own metrics are declared the same way
in their modules (harness/measure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric a run logs (a family of them where `name` ends in `*`, e.g. `len_b*_ppl`)."""
    name: str
    better: str                 # higher | lower | "" (a count, a cost or a setting: no direction)
    label: str                  # how a table names it
    aggregate: str = "mean"     # over seeds: mean (a 95 % t-interval around it) | first (the same for every seed)
    claim: str = ""             # the claims.yaml metric key it feeds ("" none)
    transform: str | None = None  # the claim's transform: log (ln PPL) | fade (harness/report/shares.py) | None
    claim_key: str = ""         # the MLflow metric (or prefix, for fade) the claim reads; default `name`


# A metric appears once per claim key that reads it (dev_ppl: as PPL and as ln PPL).
CORE: tuple[Metric, ...] = (
    Metric("dev_ppl", "lower", "dev PPL", claim="ppl"),
    Metric("dev_ppl", "lower", "dev ln PPL", claim="nll", transform="log"),
    Metric("dev_bleu", "higher", "BLEU", claim="bleu"),
    Metric("dev_bleu_tok", "higher", "BLEU tok", claim="bleu_tok"),
    Metric("dev_f1", "higher", "F1", claim="f1"),
    Metric("test_f1", "higher", "test F1", claim="test_f1"),
    Metric("test_f1_constrained", "higher", "test F1 constrained"),
    Metric("test_well_formed", "higher", "test well-formed"),
    Metric("test_bleu", "higher", "test BLEU", claim="test_bleu"),
    Metric("test_bleu_tok", "higher", "test BLEU tok", claim="test_bleu_tok"),
    # Multi30K's literature: lowercased, tokenized
    Metric("test_bleu_tok_lc", "higher", "test BLEU tok lc", claim="test_bleu_tok_lc"),
    Metric("test_ppl", "lower", "test PPL", claim="test_ppl"),
    Metric("test_ppl", "lower", "test ln PPL", claim="test_nll", transform="log"),
    # Table 1's probes: fitted exponents of the forward time in n and in d, sequential operations at the largest n,
    # measured and by the layer's construction, and path lengths at the largest path n, measured from gradients and
    # by the paper's formula.
    Metric("exp_n_fwd", "", "exponent in n", claim="exp_n"),
    Metric("exp_d_fwd", "", "exponent in d", claim="exp_d"),
    Metric("seq_ops_measured", "lower", "sequential operations", claim="seq_ops"),
    Metric("seq_ops_by_construction", "lower", "sequential operations (construction)", claim="seq_ops_formula"),
    Metric("path_measured_max_n", "lower", "path length", claim="path"),
    Metric("path_formula_max_n", "lower", "path length (formula)", claim="path_formula"),
    # The paper's statements in its text (studies/statements.yaml, harness/probes/statements.py): log2 of the
    # crossover n over d, counted and timed (§4); h heads' cost over one head's (§3.2.2); attention's time and
    # memory by score (§3.2.1); the held-out residual of the best linear map PE_pos -> PE_pos+k (§3.5).
    Metric("crossover_flops", "", "log2 crossover n / d (FLOPs)", claim="crossover_flops"),
    Metric("crossover_time", "", "log2 crossover n / d (time)", claim="crossover_time"),
    Metric("mh_flops_ratio", "", "FLOPs, h heads / 1 head", claim="mh_flops_ratio"),
    Metric("mh_time_ratio", "", "time, h heads / 1 head", claim="mh_time_ratio"),
    Metric("attn_ms", "lower", "attention ms (forward + backward)", claim="attn_ms"),
    Metric("attn_ms", "lower", "attention ln ms", claim="attn_log_ms", transform="log"),
    Metric("attn_mem_bytes", "lower", "attention memory (bytes)", claim="attn_mem"),
    Metric("offset_residual", "lower", "held-out residual of PE_pos -> PE_pos+k", claim="offset_residual"),
    # §4's convolutions: the exponent in the kernel width k of a convolution's cost over a recurrent layer's, and of
    # a convolution's over its separable form's, counted (forward FLOPs) and timed (forward + backward).
    Metric("conv_k_exp_flops", "", "exponent in k, conv / recurrent FLOPs", claim="conv_k_exp_flops"),
    Metric("conv_k_exp_time", "", "exponent in k, conv / recurrent time", claim="conv_k_exp_time"),
    Metric("sep_gain_exp_flops", "", "exponent in k, conv / separable FLOPs", claim="sep_gain_exp_flops"),
    Metric("sep_gain_exp_time", "", "exponent in k, conv / separable time", claim="sep_gain_exp_time"),
    # The inference study (harness/probes/inference.py, summary_metrics): decode tokens/s at the last point, the
    # cache over a full-head cache's beside kv heads / query heads, and decode's gain from batching over prefill's.
    Metric("decode_tok_s_last", "higher", "decode tokens/s (largest batch, longest source)", claim="decode_tok_s"),
    Metric("kv_fraction_of_mha", "lower", "KV cache over a full-head cache's", claim="kv_fraction_of_mha"),
    Metric("kv_heads_fraction", "", "KV heads / query heads", claim="kv_heads_fraction"),
    Metric("decode_over_prefill_gain", "", "decode's batch gain over prefill's", claim="decode_over_prefill_gain"),
    # Table 2: the training cost counted
    Metric("train_flops", "lower", "training FLOPs", claim="train_flops"),
    Metric("params", "", "parameters"),
    Metric("train_seconds", "lower", "training seconds"),
)

# The runs table of a study's MLflow view (tracking.share_view) and each row's key figure on the parent run: the
# first of these a trial logged.
VIEW = ("dev_ppl", "dev_bleu", "dev_bleu_tok", "test_bleu", "test_bleu_tok", "test_f1", "test_f1_constrained",
        "test_well_formed", "exp_n_fwd", "exp_d_fwd", "params", "train_seconds")


def claim_metrics() -> dict[str, tuple[str, str | None]]:
    """{claims.yaml key: (the MLflow metric it reads, transform)} of the core metrics."""
    return {m.claim: (m.claim_key or m.name, m.transform) for m in CORE if m.claim}


def label(name: str) -> str:
    """How a table names a core metric (the first entry of that name)."""
    return next(m.label for m in CORE if m.name == name)


# How a run under the patience rule (harness/train/patience.py) ended, from its final metrics: the one reading that
# the status view, a report's per-row notes and its provenance count share.
ENDINGS = ("diverged", "rule", "budget", "time limit")


def run_ending(metrics: dict) -> str:
    """One of ENDINGS for a finished run that trained under the patience rule, "" for one without it (fixed
    steps). `metrics` maps metric names to their final values; a NaN or absent value was not logged. A run that
    diverged under train.stop_diverged counts as diverged whatever the rule's flags say; a run logged before
    `hit_budget` existed and not stopped by the rule hit its budget (train.max_minutes came later)."""
    def flag(name: str) -> float | None:
        v = metrics.get(name)
        return None if v is None or v != v else float(v)
    if (flag("diverged") or 0.0) >= 0.5:
        return "diverged"
    rule = flag("stopped_by_rule")
    if rule is None:
        return ""
    if rule >= 0.5:
        return "rule"
    budget = flag("hit_budget")
    return "budget" if budget is None or budget >= 0.5 else "time limit"


def ending_step(metrics: dict, how: str, last: int) -> int:
    """The step an ending names: where a diverged run diverged (`diverged_step`, where it was logged), else the
    run's last step."""
    at = metrics.get("diverged_step") if how == "diverged" else None
    return last if at is None or at != at else int(at)


def ending_words(how: str, step: int, best: int) -> str:
    """How one run ended, as a report cell and the status view say it: `how` from run_ending, `step` its last
    step (or the step it diverged at), `best` the step of its best dev PPL."""
    if how == "diverged":
        return f"diverged at step {step}"
    if how == "rule":
        return f"stopped by the rule at step {step} (best {best})"
    if how == "time limit":
        return f"stopped by its time limit at step {step} (best {best})"
    if how == "budget":
        return f"hit the budget of {step} steps " + ("while improving" if best == step else f"(best {best})")
    return f"ran its {step} steps (no patience rule)"
