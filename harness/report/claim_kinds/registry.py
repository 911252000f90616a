"""The registry of claim kinds. A claim of harness/paper/claims.yaml says what it expects of the runs (`expect:`);
each kind is one class here, registered under that name, holding everything the kind decides: which claims of it
are well formed, its verdict, its cells in the report's claims table, its "why" sentence and whether its point
estimate lies on the paper's side. harness/report/verdicts.py loads the claims and judges each by its kind;
harness/report/claims_section.py writes them. A new kind is a class and one `register` call, nothing else.

The built-in kinds, one module each: compare.py (better, equivalent: two rows seed by seed), value.py (a
measurement against the paper's formula), above.py (a threshold), gap.py (gap_grows: a gap between gaps) and
sooner.py (time to a rival's best quality); and check.py, the kind of harness/paper/checks.yaml's checks of the
implementation, which the report keeps apart from the claims. Plain Python and pandas: reports never import torch.
"""

from __future__ import annotations

import math
from typing import Callable

import pandas as pd

Values = dict[str, dict[int, float]]            # {row: {seed: value}} of one metric over the finished runs

NOT_RUN = {"verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"), "high": float("nan"),
           "a_mean": float("nan"), "b_mean": float("nan")}


def num3(x: float) -> str:
    """A claim figure in three significant digits, whatever its scale (an exponent's 0.12, a residual's 3.1e-15)."""
    return "–" if x is None or pd.isna(x) else f"{x:.3g}"


def claim_value(metric: str, x: float) -> str:
    """A row's figure on a claim's metric as a reader knows it: ln PPL as PPL, ln ms as ms, a fade in points."""
    if pd.isna(x):
        return "–"
    if metric.endswith("nll"):                                     # nll, test_nll, long_nll: ln PPL
        return f"PPL {math.exp(x):.2f}"
    if metric.endswith("log_ms"):                                  # ln milliseconds
        return f"{math.exp(x):.2f} ms"
    if metric.endswith("_fade"):                                   # a share's fall, in percentage points
        return f"fade {100 * x:+.1f} points"
    if metric in ("seq_ops", "path"):                              # counts as counts
        return f"{x:g}"
    return f"{x:.2f}" if x == 0 or 0.01 <= abs(x) < 1e6 else f"{x:.3g}"   # a residual's 3.1e-15 as such


def difference_cell(c: dict) -> str:
    """The Δ cell every kind starts from: the difference with its interval, in the metric's unit, and the seeds."""
    metric = c.get("part_metric", c["claim"].metric)       # a claim of parts shows its farthest part's figures
    unit = "ln PPL" if metric.endswith("nll") else metric
    return ("–" if pd.isna(c["diff"]) else f"{c['diff']:+.3f}" if pd.isna(c["low"]) else
            f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]") + f" {unit}, n={c['n']}"


def no_interval(n: int, paired: bool = False) -> str:
    """Why a verdict from fewer than two seeds is inconclusive."""
    return f"{n} {'paired ' if paired else ''}seed{'s' if n != 1 else ''}: no interval (run with `--seeds 0,1,2`)"


def within(low: float, high: float, m: float) -> str:
    """holds if [low, high] lies inside [-m, m], contradicted if wholly outside it, else inconclusive."""
    return "holds" if -m <= low and high <= m else "contradicted" if low > m or high < -m else "inconclusive"


def combine(verdicts: list[str]) -> str:
    """A claim of parts: holds if every part holds, contradicted if any part is, inconclusive otherwise."""
    return "holds" if all(v == "holds" for v in verdicts) else "contradicted" if "contradicted" in verdicts \
        else "inconclusive"


class ClaimKind:
    """One kind of claim. `judge` reads the runs through two callables: values(metric) -> {row: {seed: value}}
    over the finished runs, curves(row) -> {seed: dev BLEU curve} (for a kind with reads_curves)."""

    name = ""               # claims.yaml's `expect`
    is_check = False        # a check of the implementation (checks.yaml), not a claim of the paper
    reads_curves = False    # judged on dev BLEU curves read from the store, not on final metrics
    note = ""               # a sentence the claims section adds to its opening paragraph where the kind is present
    # The seeds a verdict of this kind needs: a comparison or a threshold is decided by an interval over seeds (3 at
    # the least); a measurement against a formula (value, check) is decided by one.
    needs_seeds = 3

    def validate(self, claim, metrics: dict) -> str | None:
        """What is wrong with a claim of this kind (one sentence), or None; `metrics` names every claim metric."""
        return None

    def judge(self, claim, values: Callable[[str], Values], curves: Callable[[str], dict]) -> dict:
        raise NotImplementedError

    def cells(self, c: dict) -> tuple[str, str, str]:
        """The claims table's cells of a judged claim `c`: the paper's figures, ours, and the difference with
        its interval and what the kind asks of it."""
        return c["claim"].paper.get("finding", "–"), f"{c['a']} against {c['b']}", difference_cell(c)

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        """Why the runs give this verdict (never "not run": the claims section says that for every kind);
        `diag` is each row's stopping diagnostics, `deps` the departures that set rows apart."""
        return ""

    def points_the_papers_way(self, c: dict) -> bool:
        """Whether the point estimate lies on the paper's side (its diff is a number here)."""
        return c["diff"] > 0

    def describe(self, claim) -> str:
        """What the claim expects, in a few words (`list claims`)."""
        return self.name


KINDS: dict[str, ClaimKind] = {}


def register(kind: ClaimKind) -> ClaimKind:
    """Add a kind under its name; a second kind of the same name is refused (a test's toy kind replaces itself)."""
    old = KINDS.get(kind.name)
    if old is not None and type(old).__qualname__ != type(kind).__qualname__:
        raise ValueError(f"claim kind {kind.name!r} is already registered ({type(old).__qualname__})")
    KINDS[kind.name] = kind
    return kind


def kind_of(name: str) -> ClaimKind:
    """The kind registered as `name`; a ValueError naming the kinds there are."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"expect {name!r} is not a claim kind; the kinds are {', '.join(sorted(KINDS))}") from None
