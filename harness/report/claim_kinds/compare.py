"""Comparisons of two rows, seed by seed ("better", "equivalent"): d_s = a_s - b_s over the seeds both finished,
oriented so that d > 0 is the claimed direction, and the 95 % t-interval of mean(d) decides:
- "better": holds if the whole interval is above 0, contradicted if it is wholly below 0, else inconclusive
  (the interval spans 0); with a margin m > 0 ("better by more than m"), the same against m instead of 0;
- "equivalent" (margin m): holds if the interval lies inside [-m, m], contradicted if it lies wholly outside
  it, else inconclusive.
One seed gives no interval, so every comparison from one seed is inconclusive. A side is a row, {best: [rows]}
(the best of them by mean) or {first: [rows]} (the first that ran). A "better" claim may carry `also`, a second
comparison of the same two rows that must hold as well: "beats it at less training cost" (Table 2).
"""

from __future__ import annotations

import pandas as pd

from harness.report.claim_kinds.registry import (
    NOT_RUN,
    ClaimKind,
    Values,
    claim_value,
    difference_cell,
    no_interval,
    register,
    within,
)
from harness.report.header import claim_departures
from harness.report.stats import interval
from harness.report.stopping import all_diverged, regime_note


def _side(spec, values: Values, better: str) -> tuple[str | None, str]:
    """The row a side of a claim stands for, and how it was chosen."""
    if isinstance(spec, str):
        return (spec if spec in values else None), spec
    if "first" in spec:
        row = next((r for r in spec["first"] if r in values), None)
        return row, f"{row}" if row else "first of " + ", ".join(spec["first"])
    rows = [r for r in spec["best"] if r in values]
    if not rows:
        return None, "best of " + ", ".join(spec["best"])
    sign = -1 if better == "lower" else 1
    best = max(rows, key=lambda r: sign * sum(values[r].values()) / len(values[r]))
    return best, f"best of {', '.join(spec['best'])} = {best}"


def _paired(a: str, b: str, values: Values, better: str, expect: str = "better", margin: float = 0.0) -> dict:
    """Rows a and b compared seed by seed: the paired difference's interval and its verdict."""
    seeds = sorted(set(values.get(a, {})) & set(values.get(b, {})))
    sign = -1.0 if better == "lower" else 1.0     # d > 0: a better than b
    diffs = [sign * (values[a][s] - values[b][s]) for s in seeds]
    mean, low, high, n = interval(diffs)
    if n < 2:
        result = "inconclusive" if n else "not run"
    elif expect == "better":       # by more than the margin (0: at all)
        result = "holds" if low > margin else "contradicted" if high < margin else "inconclusive"
    else:
        result = within(low, high, margin)
    return {"verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[a][s] for s in seeds)[0] if n else float("nan"),
            "b_mean": interval(values[b][s] for s in seeds)[0] if n else float("nan")}


def verdict(claim, values: Values, also_values: Values | None = None) -> dict:
    """The claim checked on {row: {seed: value}}: rows used, paired difference with its interval, verdict.
    A claim with `also` compares the same two rows on also_values too (its "also" entry), and holds only if
    both comparisons do."""
    a, a_label = _side(claim.a, values, claim.better)
    b, b_label = _side(claim.b, values, claim.better)
    out = {"id": claim.id, "a": a_label, "b": b_label, "a_row": a, "b_row": b, "metric": claim.metric,
           "expect": claim.expect, "margin": claim.margin}
    if a is None or b is None or a == b:
        return {**out, **NOT_RUN}
    main = _paired(a, b, values, claim.better, claim.expect, claim.margin)
    if main["verdict"] == "not run":
        main["verdict"] = "inconclusive"
    if not claim.also:
        return {**out, **main}
    also = {**_paired(a, b, also_values or {}, claim.also["better"]), "metric": claim.also["metric"]}
    parts = (main["verdict"], also["verdict"])
    combined = "holds" if parts == ("holds", "holds") else "contradicted" if "contradicted" in parts else \
        "inconclusive"
    return {**out, **main, "verdict": combined, "main_verdict": main["verdict"], "also": also}


class Better(ClaimKind):
    """Row a better than row b (by more than `margin` where one is given)."""

    name = "better"

    def validate(self, claim, metrics: dict) -> str | None:
        if claim.better not in ("lower", "higher"):
            return f"better must be lower|higher on a claim that expects {self.name}"
        if claim.margin < 0:
            return "a margin must not be negative (better: by more than the margin)"
        if claim.also and (sorted(claim.also) != ["better", "metric"] or claim.also["metric"] not in metrics
                           or claim.also["better"] not in ("lower", "higher") or self.name != "better"):
            return (f"also must be {{metric: one of {', '.join(metrics)}, better: lower|higher}}, "
                    "on a claim that expects better")
        for side in (claim.a, claim.b):
            if not (isinstance(side, str) or (isinstance(side, dict) and list(side) in (["best"], ["first"]))):
                return "a and b must be a row, {best: [rows]} or {first: [rows]}"
        return None

    def judge(self, claim, values, curves) -> dict:
        return verdict(claim, values(claim.metric), values(claim.also["metric"]) if claim.also else None)

    def cells(self, c: dict) -> tuple[str, str, str]:
        claim = c["claim"]
        paper = claim.paper
        paper_cell = f"{paper['a']:g} vs {paper['b']:g} ({paper.get('metric', claim.metric)})" if paper else "–"
        metric = c.get("part_metric", claim.metric)
        ours = f"{c['a']}: {claim_value(metric, c['a_mean'])} vs {c['b']}: {claim_value(metric, c['b_mean'])}"
        diff = difference_cell(c)
        if c.get("also"):        # a second comparison of the same rows, which must hold too
            x = c["also"]
            what = "–" if pd.isna(x["diff"]) else f"{x['diff']:+.3g}" if pd.isna(x["low"]) else \
                f"{x['diff']:+.3g} [{x['low']:+.3g}, {x['high']:+.3g}]"
            diff += (f" ({c['main_verdict']}); and {x['metric']} ({claim.also['better']} is better): {c['a_row']} "
                     f"{x['a_mean']:.3g} vs {c['b_row']} {x['b_mean']:.3g}, Δ {what}, n={x['n']} ({x['verdict']})")
        return paper_cell, ours, diff + self.rule(claim)

    def rule(self, claim) -> str:
        return f", by more than {claim.margin:g}" if claim.margin else ""

    def holds_because(self, c: dict) -> str:
        return f"lies above {c['margin']:g}"

    def inconclusive_because(self, c: dict) -> str:
        return (f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                f"spans {c['margin']:g}: the effect, if any, is within the seed-to-seed spread at this scale")

    def contradicted_because(self, c: dict) -> str:
        if c["margin"] == 0:
            return (f"{c['b_row']} is better than {c['a_row']} on every reading of the interval "
                    f"[{c['low']:+.3f}, {c['high']:+.3f}]")
        return (f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies below the margin {c['margin']:g}: "
                f"{c['a_row']} is not better than {c['b_row']} by that much")

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        """The interval against 0 or the margin, and what the verdict rests on, even where it holds: a row still
        improving or near the plateau, a row that did not over-fit where the claim is about over-fitting, and the
        departures from the paper under which its rows stand to each other otherwise than in the paper."""
        notes = []
        if c["n"] < 2:
            notes.append(no_interval(c["n"], paired=True))
        elif c["verdict"] == "holds":
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference "
                         f"{c['diff']:+.3f} " + self.holds_because(c))
        rests = "it rests on " if c["verdict"] == "holds" else ""
        rows = list(dict.fromkeys(r for r in (c["a_row"], c["b_row"]) if r))
        for row in rows:
            d = diag.get(row, {})
            regime = regime_note(row, diag)
            if regime and not regime.startswith("stopped by the rule"):     # a row the rule stopped is no caveat
                notes.append(f"{rests}{row}, which was {regime}" if rests else f"{row} was {regime}")
            if d.get("seeds") and not d.get("rose") and c["claim"].regime == "over-fitting":
                notes.append(f"{row} did not over-fit: its dev PPL was at its lowest at the end in every seed")
        if deps and rows:
            moved = claim_departures(rows, deps, with_base)
            if moved:
                notes.append(f"{'it rests on ' if rests else ''}departures from the paper that change how its rows "
                             f"compare: {'; '.join(moved)}")
        if c["n"] >= 2 and c["verdict"] == "inconclusive" and rows and all(
                all_diverged(diag.get(r, {}).get("diverged", (0, 0))) for r in rows):
            notes.append("both rows are scored as their start, the same initialisation on both sides: the runs "
                         "cannot order them")
        elif c["n"] >= 2 and c["verdict"] == "inconclusive":
            notes.append(self.inconclusive_because(c))
        if c.get("also"):
            x = c["also"]
            notes.append(f"both parts must hold: {c['metric']} {c['main_verdict']}, {x['metric']} {x['verdict']}")
        if c["verdict"] == "contradicted" and c.get("main_verdict", "contradicted") == "contradicted":
            notes.append(self.contradicted_because(c))
        return "; ".join(notes)


class Equivalent(Better):
    """Rows a and b within ±margin of each other."""

    name = "equivalent"

    def validate(self, claim, metrics: dict) -> str | None:
        if not claim.margin > 0:
            return "an equivalence claim needs a margin > 0"
        return super().validate(claim, metrics)

    def rule(self, claim) -> str:
        return f", margin ±{claim.margin:g}"

    def holds_because(self, c: dict) -> str:
        return f"lies inside ±{c['margin']:g}"

    def inconclusive_because(self, c: dict) -> str:
        return f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] is not inside ±{c['margin']:g}"

    def contradicted_because(self, c: dict) -> str:
        return f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies outside ±{c['margin']:g}"

    def points_the_papers_way(self, c: dict) -> bool:
        return abs(c["diff"]) <= c["claim"].margin

    def describe(self, claim) -> str:
        return f"equivalent within ±{claim.margin:g}"


register(Better())
register(Equivalent())
