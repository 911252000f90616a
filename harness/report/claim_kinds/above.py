"""Threshold claims ("above", the heads probe's): one row's value per seed against a fixed `target` stated in
claims.yaml before the runs: holds if the interval of value - target lies above 0, contradicted if below,
inconclusive if it spans 0 (one seed: inconclusive, as for comparisons).
"""

from __future__ import annotations

from harness.report.claim_kinds.registry import NOT_RUN, ClaimKind, Values, difference_cell, no_interval, register
from harness.report.stats import interval
from harness.report.stopping import diverged_why


def above_verdict(claim, values: Values) -> dict:
    """A threshold claim checked: the row's value - target per seed, its interval, and the verdict."""
    a = claim.a if claim.a in values else None
    out = {"id": claim.id, "a": claim.a, "b": f"target {claim.target:g}", "a_row": a, "b_row": None,
           "metric": claim.metric, "expect": claim.expect, "margin": 0.0}
    seeds = sorted(values.get(a, {})) if a else []
    if not seeds:
        return {**out, **NOT_RUN}
    mean, low, high, n = interval(values[a][s] - claim.target for s in seeds)
    result = "inconclusive" if n < 2 else "holds" if low > 0 else "contradicted" if high < 0 else "inconclusive"
    return {**out, "verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[a][s] for s in seeds)[0], "b_mean": float(claim.target)}


class Above(ClaimKind):
    name = "above"
    note = (" A threshold claim compares one row's measured value with a target fixed in claims.yaml before "
            "the runs: Δ is value - target, and it holds if Δ's interval over seeds lies above 0, is "
            "contradicted if it lies below 0, inconclusive otherwise.")

    def validate(self, claim, metrics: dict) -> str | None:
        if not isinstance(claim.a, str) or claim.b is not None or claim.target is None:
            return "a threshold claim names one row as a, no b, and a target"
        return None

    def judge(self, claim, values, curves) -> dict:
        return above_verdict(claim, values(claim.metric))

    def cells(self, c: dict) -> tuple[str, str, str]:
        claim = c["claim"]
        return (claim.paper.get("finding", "–"), f"{c['a']}: {c['a_mean']:.3g} against {c['b_mean']:g}",
                difference_cell(c) + f", above {claim.target:g}")

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        if c["n"] < 2:
            return no_interval(c["n"]) + diverged_why(c, diag)
        side = {"holds": "lies above 0", "contradicted": "lies below 0", "inconclusive": "spans 0"}[c["verdict"]]
        return (f"{c['a_row']} measured {c['a_mean']:.3g} against the target {c['b_mean']:g} fixed before the runs; "
                f"the interval [{c['low']:+.3g}, {c['high']:+.3g}] of value − target {side}") + diverged_why(c, diag)

    def describe(self, claim) -> str:
        return f"above {claim.target:g}"


register(Above())
