"""Interaction claims ("gap_grows", the depth study's): a = [x, y] and b = [u, v], seed by seed
d = (x - y) - (u - v) on the metric, oriented by `better` so that d > 0 is "x falls further behind y than u behind
v" (e.g. post-norm's deficit to pre-norm at 24 layers against at 6); its interval decides as for "better".
"""

from __future__ import annotations

from harness.report.claim_kinds.registry import ClaimKind, Values, difference_cell, no_interval, num3, register
from harness.report.stats import interval
from harness.report.stopping import diverged_why


def gap_verdict(claim, values: Values) -> dict:
    """A gap_grows claim checked: per seed d = (x - y) - (u - v), oriented so that d > 0 is x worse than y by more
    than u is worse than v (better: lower: "worse" is higher), its interval, and the verdict."""
    (x, y), (u, v) = claim.a, claim.b
    rows = (x, y, u, v)
    seeds = sorted(set.intersection(*(set(values.get(r, {})) for r in rows))) if all(r in values for r in rows) \
        else []
    sign = 1.0 if claim.better == "lower" else -1.0
    gap = lambda r1, r2, s: sign * (values[r1][s] - values[r2][s])   # noqa: E731   r1 behind r2 (> 0)
    mean, low, high, n = interval(gap(x, y, s) - gap(u, v, s) for s in seeds)
    out = {"id": claim.id, "a": f"{x} − {y}", "b": f"{u} − {v}", "a_row": x if seeds else None, "b_row": u if seeds
           else None, "metric": claim.metric, "expect": claim.expect, "margin": 0.0, "n": n, "diff": mean, "low": low,
           "high": high, "a_mean": interval(gap(x, y, s) for s in seeds)[0] if seeds else float("nan"),
           "b_mean": interval(gap(u, v, s) for s in seeds)[0] if seeds else float("nan")}
    result = "not run" if not seeds else "inconclusive" if n < 2 else \
        "holds" if low > 0 else "contradicted" if high < 0 else "inconclusive"
    return {**out, "verdict": result}


class GapGrows(ClaimKind):
    name = "gap_grows"

    def validate(self, claim, metrics: dict) -> str | None:
        pairs = (claim.a, claim.b)
        if not all(isinstance(x, list) and len(x) == 2 and all(isinstance(r, str) for r in x) for x in pairs) \
                or claim.better not in ("lower", "higher"):
            return "a gap_grows claim names two rows as a, two as b, and better: lower|higher"
        return None

    def judge(self, claim, values, curves) -> dict:
        return gap_verdict(claim, values(claim.metric))

    def cells(self, c: dict) -> tuple[str, str, str]:
        return (c["claim"].paper.get("finding", "–"), f"{c['a']}: {num3(c['a_mean'])} vs {c['b']}: "
                f"{num3(c['b_mean'])}", difference_cell(c))

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        if c["n"] < 2:
            return no_interval(c["n"]) + diverged_why(c, diag)
        side = {"holds": "lies above 0: the gap grew", "contradicted": "lies below 0: the gap shrank",
                "inconclusive": "spans 0"}[c["verdict"]]
        return (f"the gap {c['a']} was {c['a_mean']:+.3f} and {c['b']} {c['b_mean']:+.3f}; the interval "
                f"[{c['low']:+.3f}, {c['high']:+.3f}] of their difference {side}") + diverged_why(c, diag)


register(GapGrows())
