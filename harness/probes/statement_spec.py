"""What a row of studies/statements.yaml measures: one of the paper's statements in its text that no table prints
(§3.2.1, §3.2.2, §3.5, §4), each a measurement with the settings it is made at. No torch, so that the study file's
checks and the report read it without the probe (harness/probes/statements.py, which measures).

Measures (`measure:`):
  crossover        §4: a self-attention layer against a recurrent one, forward + backward, over n = d x factors at
                   one width d; the n at which their counted FLOPs, and their measured times, are equal.
  multi_head       §3.2.2: the model's multi-head attention (projections included) with h heads of d_model / h
                   against one head of d_model, forward + backward: counted FLOPs and measured time.
  dot_vs_additive  §3.2.1: the model's attention with scaled dot-product or additive scores (`score`) at equal
                   d_k, forward + backward at each d_k of `d_ks`: time and memory.
  offset           §3.5: for offsets k = 1..max_offset, the least-squares linear map from PE_pos to PE_pos+k,
                   fitted on the even positions and tested on the odd ones, in float64, for the sinusoid or a
                   learned table (`embedding`).
  conv_cost        §4: a convolutional layer of kernel width k (each of `ks`), its separable form (depthwise k, then
                   pointwise 1 x 1) and a recurrent layer, at width d over n positions: counted forward FLOPs and
                   measured forward + backward time, and how each cost ratio grows with k (its exponent in k).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.errors import suggest

MEASURES = ("crossover", "multi_head", "dot_vs_additive", "offset", "conv_cost")
RECURRENT = ("rnn_torch", "rnn_loop")
SCORES = ("scaled", "additive")
EMBEDDINGS = ("sinusoid", "learned")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class StatementSpec:
    """One row of studies/statements.yaml (base.probe -> row -> profile.probe); each measure reads the fields its
    line in the module doc names and ignores the others."""
    measure: str = "crossover"
    # crossover
    d: int = 64                                     # the width d (offset: d_model)
    factors: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)   # n = d x factor, swept upward
    recurrent: str = "rnn_torch"                    # the recurrent layer timed (harness/probes/scaling.py)
    # multi_head, dot_vs_additive
    d_model: int = 512
    heads: int = 8                                  # multi_head: h against 1; dot_vs_additive: h at each d_k
    n: int = 32                                     # sequence length (queries = keys: self-attention)
    score: str = "scaled"                           # dot_vs_additive: scaled | additive
    d_ks: tuple[int, ...] = (64, 256)               # dot_vs_additive: the key widths, each timed
    batch: int = 16
    # offset
    positions: int = 1024                           # PE rows used: pos = 0 .. positions - 1 (and pos + k)
    max_offset: int = 50
    embedding: str = "sinusoid"                     # sinusoid | learned (the model's table at initialization)
    # conv_cost (with d, n, batch and recurrent)
    ks: tuple[int, ...] = (3, 5, 9, 17)             # the kernel widths k, each measured
    # timing
    repeats: int = 5                                # timed blocks; each point keeps its fastest (scaling.py)
    warmup: int = 2
    threads: int = 1                                # CPU intra-op threads
    device: str = "auto"

    def validate(self) -> None:
        if self.measure not in MEASURES:
            raise ValueError(f"measure {self.measure!r} is not one of {', '.join(MEASURES)}"
                             f"{suggest(self.measure, MEASURES)}")
        for name, allowed in (("recurrent", RECURRENT), ("score", SCORES), ("embedding", EMBEDDINGS),
                              ("device", DEVICES)):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{name} {v!r} is not one of {', '.join(allowed)}{suggest(str(v), allowed)}")
        for name in ("d", "d_model", "heads", "n", "batch", "positions", "max_offset", "repeats", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if not isinstance(self.factors, (list, tuple)) or len(self.factors) < 3 or \
                any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0 for f in self.factors) or \
                list(self.factors) != sorted(self.factors):
            raise ValueError(f"factors must be at least 3 positive numbers in increasing order, got {self.factors!r}")
        if not isinstance(self.d_ks, (list, tuple)) or not self.d_ks or \
                any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in self.d_ks):
            raise ValueError(f"d_ks must be a non-empty list of positive integers, got {self.d_ks!r}")
        if not isinstance(self.ks, (list, tuple)) or len(self.ks) < 2 or list(self.ks) != sorted(set(self.ks)) or \
                any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in self.ks):
            raise ValueError(f"ks must be at least 2 increasing integers >= 2 (kernel widths), got {self.ks!r}")
        if self.measure == "multi_head" and self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} must be divisible by heads {self.heads}")
        if self.measure == "offset" and (self.d % 2 or self.positions < 4 * self.max_offset):
            raise ValueError("offset needs an even d and positions >= 4 x max_offset")


def statement_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(StatementSpec)]


# The final metrics each measure logs (claims.yaml names them; harness/metrics.py declares them).
METRICS = {
    "crossover": ("crossover_flops", "crossover_time", "crossover_n_flops", "crossover_n_time"),
    "multi_head": ("mh_flops_ratio", "mh_time_ratio"),
    "dot_vs_additive": ("attn_ms", "attn_mem_bytes"),
    "offset": ("offset_residual",),
    "conv_cost": ("conv_k_exp_flops", "conv_k_exp_time", "sep_gain_exp_flops", "sep_gain_exp_time"),
}
