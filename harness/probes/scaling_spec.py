"""What a Table 1 row measures, and how its exponents are fitted: no torch, so that the study file's
checks and the report read it without the probe (harness/probes/scaling.py, which times the layers).

Fixed-cost rule for the exponent fits: within one sweep keep the points whose time is at least
`fixed_mult` (default 3) times the sweep's smallest time; below that the per-call overhead (Python,
dispatch, kernel launch) is a large share of the time. If fewer than 3 points pass, the 3 largest
x values are used and the fit is flagged `fixed_cost_dominated`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from harness.errors import suggest

TIMED = ("sdpa", "plain", "restricted", "rnn_loop", "rnn_torch", "conv", "conv_separable")
PATH_KINDS = ("sdpa", "rnn_loop", "conv", "conv_dilated", "restricted")
# The model's own self-attention (model/attention.py, projections included) beside the probe's layers: the sliding
# window as the trained models run it (a mask over the n x n scores), and one cached decoding step at position n with
# the full cache and with the window's ring of r + 1 keys. Their time is what a model with `attention_window` pays.
MODEL_KINDS = ("window_model", "decode_full", "decode_window")
DECODE_KINDS = ("decode_full", "decode_window")      # a decoding step has no backward pass worth timing
LAYERS = (*TIMED, "conv_dilated", *MODEL_KINDS)
# The layer whose measurement stands in for another's, each said once: a dilated convolution costs what the
# contiguous one costs (the dilation changes no FLOP), and nn.RNN's path is the Python loop's (the same recurrence,
# hidden in a kernel that the gradient check cannot see into).
TIMED_AS = {"conv_dilated": "conv"}
PATH_AS = {"rnn_torch": "rnn_loop", "window_model": "restricted", "decode_window": "window_causal",
           "decode_full": "sdpa"}
# How far a fitted exponent may sit from the paper's before the probe's notes and Table 1's report say why.
EXPONENT_TOLERANCE = 0.2

# Sized for a 2-core CPU: DEFAULTS in a few minutes, QUICK in about a minute. Batch and the upper
# ends are large enough that the d x d / n x n work outgrows per-call overhead on most layers.
DEFAULTS = {"ns": (128, 256, 512, 1024, 2048), "ds": (64, 128, 256, 512, 1024), "n_fixed": 256, "d_fixed": 64,
                "batch": 16, "repeats": 5, "warmup": 2}
QUICK = {"ns": (64, 128, 256, 512, 1024), "ds": (32, 64, 128, 256, 512), "n_fixed": 256, "d_fixed": 64,
             "batch": 4, "repeats": 3, "warmup": 1}


@dataclass(frozen=True)
class ScalingSpec:
    """One row of studies/table1.yaml: a layer type and the grid it is timed on (rows override these)."""
    layer: str = "sdpa"
    ns: tuple[int, ...] = DEFAULTS["ns"]          # sequence lengths, at d = d_fixed
    ds: tuple[int, ...] = DEFAULTS["ds"]          # widths, at n = n_fixed
    n_fixed: int = DEFAULTS["n_fixed"]
    d_fixed: int = DEFAULTS["d_fixed"]
    batch: int = DEFAULTS["batch"]
    k: int = 3                                    # kernel of the convolutions
    r: int = 16                                   # neighbourhood of restricted attention (timing)
    heads: int = 1
    repeats: int = DEFAULTS["repeats"]
    warmup: int = DEFAULTS["warmup"]
    passes: int = 3                               # whole sweeps, alternating direction; each point keeps its fastest
    fixed_mult: float = 3.0
    threads: int = 1                              # CPU intra-op threads (module doc of run_scaling)
    device: str = "auto"                          # auto | cpu | cuda
    path_ns: tuple[int, ...] = (9, 16, 17)
    path_k: int = 3
    path_r: int = 4

    def validate(self) -> None:
        if self.layer not in LAYERS:
            raise ValueError(f"layer {self.layer!r} is not one of {', '.join(LAYERS)}{suggest(self.layer, LAYERS)}")
        for name in ("ns", "ds", "path_ns"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)) or len(v) < 3 or \
                    any(isinstance(x, bool) or not isinstance(x, int) or x < 2 for x in v):
                raise ValueError(f"{name} must be a list of at least 3 integers >= 2, got {v!r}")
        for name in ("n_fixed", "d_fixed", "batch", "k", "r", "heads", "repeats", "path_k", "path_r", "threads",
                     "passes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.k < 2 or self.path_k < 2:
            raise ValueError("kernel sizes k and path_k must be at least 2")
        if any(d % self.heads for d in (*self.ds, self.d_fixed)):
            raise ValueError(f"every width must be divisible by heads={self.heads}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if isinstance(self.fixed_mult, bool) or not isinstance(self.fixed_mult, (int, float)) or self.fixed_mult < 1:
            raise ValueError(f"fixed_mult must be a number >= 1, got {self.fixed_mult!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")


def scaling_fields() -> dict[str, type]:
    return {f.name: f.type for f in dataclasses.fields(ScalingSpec)}


def fit_exponent(xs, ts, fixed_mult: float = 3.0) -> dict:
    """Least-squares slope of log t on log x over the points past the fixed-cost regime (module doc)."""
    pts = sorted(zip(xs, ts))
    t_min = min(t for _, t in pts)
    keep = [(x, t) for x, t in pts if t >= fixed_mult * t_min]
    dominated = len(keep) < 3
    if dominated:
        keep = pts[-3:]
    lx = [math.log(x) for x, _ in keep]
    lt = [math.log(t) for _, t in keep]
    mx, mt = statistics.fmean(lx), statistics.fmean(lt)
    sxx = sum((a - mx) ** 2 for a in lx)
    slope = sum((a - mx) * (b - mt) for a, b in zip(lx, lt)) / sxx if sxx > 0 else float("nan")
    return {"slope": slope, "x_used": [x for x, _ in keep], "dropped": len(pts) - len(keep),
                "fixed_cost_dominated": dominated, "time_ratio": pts[-1][1] / pts[0][1]}  # largest x / smallest x


def exponent_note(name: str, var: str, label: str, got: float, want: float, sweep: tuple[float, float] | None,
                  time_ratio: float, dropped: float, dominated: bool, fixed_mult: float) -> str | None:
    """Where a fitted exponent departs from the paper's by more than EXPONENT_TOLERANCE, the note that says so and
    why, in one sentence (the probe's printout and Table 1's report both write it); None where it does not.
    sweep: the (smallest, largest) value of `var` timed, or None where none was logged."""
    if _missing(got) or _missing(want) or abs(got - want) <= EXPONENT_TOLERANCE:
        return None
    why = (f"fixed costs dominate (fixed_cost_dominated): fewer than 3 points reached {fixed_mult:g}x the sweep's "
           "smallest time, so the 3 largest were fitted" if dominated else
           f"{dropped:.0f} smallest point(s) dropped as fixed-cost" if dropped > 0 else "no point dropped as "
                                                                                        "fixed-cost")
    if sweep and sweep[0] > 0:
        lo, hi = sweep
        ratio = "–" if _missing(time_ratio) else f"{time_ratio:.1f}"
        grew = f"time grew {ratio}x over {var} = {lo:g}..{hi:g}, where {var}^{want:g} predicts {(hi / lo) ** want:.0f}x"
    else:
        grew = "no sweep logged"
    return (f"`{name}`: exponent in {var} ({label}) {got:.2f} against the paper's {want:g} ({got - want:+.2f}); "
            f"{grew}; {why}.")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
