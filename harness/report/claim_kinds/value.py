"""Measurement claims ("value", Table 1's complexity column): one row's measured value (a fitted exponent, a count
of sequential operations, a path length) against the paper's formula, a fixed `target` or the run's own evaluation
of the formula (`target_metric`), within a stated tolerance m: with one seed the value holds if it lies within m of
the target and is contradicted otherwise (a measurement, not a sample of a noisy comparison); with several seeds
their interval decides as for "equivalent". A value claim may name several rows (`a: [rows]`, one statement
measured at several shapes) and a second metric held to the same target (`also: {metric}`): it holds if every row
holds on every metric, is contradicted if any is, else inconclusive.
"""

from __future__ import annotations

import pandas as pd

from harness.report.claim_kinds.registry import (
    NOT_RUN,
    ClaimKind,
    Values,
    claim_value,
    combine,
    difference_cell,
    num3,
    register,
    within,
)
from harness.report.stats import interval
from harness.report.stopping import diverged_why


def _value_part(claim, row: str, values: Values, targets: Values | None) -> dict:
    """One row's measured value on one metric against the claim's target: value - target over seeds, its
    interval, and the part's verdict."""
    target_of = (lambda s: claim.target) if claim.target is not None else \
        (lambda s: (targets or {}).get(row, {}).get(s))
    seeds = [s for s in sorted(values.get(row, {})) if target_of(s) is not None]
    if not seeds:
        return {"row": row, **NOT_RUN}
    mean, low, high, n = interval(values[row][s] - target_of(s) for s in seeds)
    # counts are compared exactly (margin 0), up to float rounding; a tolerance below 1e-6 is its own scale
    m = claim.margin + 1e-9 if claim.margin >= 1e-6 else claim.margin * (1 + 1e-9) or 1e-9
    result = within(mean, mean, m) if n < 2 else within(low, high, m)   # one measurement: its value decides
    return {"row": row, "verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[row][s] for s in seeds)[0], "b_mean": interval(target_of(s) for s in seeds)[0]}


def value_verdict(claim, values: Values, targets: Values | None = None, also_values: Values | None = None) -> dict:
    """A value claim checked: each row's measured value against the target (fixed, or per seed from `targets`),
    the deviation value - target with its interval over seeds, and the verdict. Several rows, or a second metric
    (`also`, its values in also_values), make several parts: the claim holds if every part holds, is contradicted
    if any is, else inconclusive; the figures shown are those of the part farthest from its target."""
    rows = [claim.a] if isinstance(claim.a, str) else list(claim.a)
    label = f"target {claim.target:g}" if claim.target is not None else f"formula ({claim.target_metric})"
    parts = [{**_value_part(claim, r, values, targets), "metric": claim.metric} for r in rows]
    if claim.also:
        parts += [{**_value_part(claim, r, also_values or {}, targets), "metric": claim.also["metric"]} for r in rows]
    ran = [p for p in parts if p["verdict"] != "not run"]
    out = {"id": claim.id, "a": claim.a if isinstance(claim.a, str) else ", ".join(rows), "b": label,
           "metric": claim.metric, "expect": claim.expect, "margin": claim.margin, "b_row": None}
    if not ran:
        return {**out, "a_row": None, **NOT_RUN, "parts": parts}
    worst = max(ran, key=lambda p: abs(p["diff"]))
    return {**out, "a_row": worst["row"], "part_metric": worst["metric"], "verdict": combine([p["verdict"]
                                                                                             for p in parts]),
            "n": min(p["n"] for p in ran), "diff": worst["diff"],
            "low": worst["low"], "high": worst["high"], "a_mean": worst["a_mean"], "b_mean": worst["b_mean"],
            "parts": parts if len(parts) > 1 else []}


class Value(ClaimKind):
    name = "value"
    needs_seeds = 1
    note = (" A measurement claim (Table 1's columns) compares one row's measured value with the paper's "
            "formula instead: Δ is measured - formula, and it holds if Δ lies within the stated tolerance "
            "(with several seeds, if its interval does), contradicted otherwise.")

    def validate(self, claim, metrics: dict) -> str | None:
        rows_ok = isinstance(claim.a, str) or (isinstance(claim.a, list) and claim.a
                                               and all(isinstance(r, str) for r in claim.a))
        if not rows_ok or claim.b is not None:
            return "a value claim names a row (or a list of rows) as a and no b"
        if claim.also and (list(claim.also) != ["metric"] or claim.also["metric"] not in metrics):
            return f"a value claim's also must be {{metric: one of {', '.join(metrics)}}}"
        if (claim.target is None) == (not claim.target_metric):
            return "a value claim needs exactly one of target and target_metric"
        if claim.target_metric and claim.target_metric not in metrics:
            return f"target_metric {claim.target_metric!r} is not one of {', '.join(metrics)}"
        if claim.margin < 0:
            return "a value claim's margin (its tolerance) must not be negative"
        return None

    def judge(self, claim, values, curves) -> dict:
        return value_verdict(claim, values(claim.metric), values(claim.target_metric) if claim.target_metric
                             else None, values(claim.also["metric"]) if claim.also else None)

    def cells(self, c: dict) -> tuple[str, str, str]:
        claim = c["claim"]
        metric = c.get("part_metric", claim.metric)
        ours = f"{c['a']}: {claim_value(metric, c['a_mean'])} against {claim_value(metric, c['b_mean'])}"
        if c.get("parts"):
            ours += f" (the part farthest from it: {c['a_row']}, {metric})"
        return claim.paper.get("formula", "–"), ours, difference_cell(c) + f", tolerance ±{claim.margin:g}"

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        return self._why(c) + diverged_why(c, diag)

    def _why(self, c: dict) -> str:
        if c.get("parts"):       # several rows or metrics: each part's deviation, then the verdict's reason
            each = "; ".join(f"{p['row']} {p['metric']} {num3(p['diff'])}"
                             + ("" if pd.isna(p["low"]) else f" [{num3(p['low'])}, {num3(p['high'])}]")
                             + f" ({p['verdict']})" for p in c["parts"])
            rule = {"holds": f"every part within ±{c['margin']:g}",
                    "contradicted": f"a part outside ±{c['margin']:g}",
                    "inconclusive": "no part outside the tolerance, but not every part inside it"}[c["verdict"]]
            return f"measured − target: {each}; {rule}"
        off = f"{c['a_row']} measured {num3(c['a_mean'])}, {num3(abs(c['diff']))} from {c['b_mean']:g}"
        if c["verdict"] == "holds":
            return f"{off}: within ±{c['margin']:g}"
        return (f"{off}: outside ±{c['margin']:g}; the row's notes in the table above say where its fit parts "
                "from the formula" if c["verdict"] == "contradicted" else
                f"{off}: its interval over seeds is neither inside nor wholly outside ±{c['margin']:g}")

    def points_the_papers_way(self, c: dict) -> bool:
        return abs(c["diff"]) <= c["claim"].margin

    def describe(self, claim) -> str:
        target = f"{claim.target:g}" if claim.target is not None else f"its {claim.target_metric}"   # the formula's
        return f"value {target} within ±{claim.margin:g}"


register(Value())
