"""Time-to-quality claims ("sooner", Table 2's "trained significantly faster"): row a's dev BLEU curve against each
row of b (a list of rivals), seed by seed: the training (seconds, or counted FLOPs) at which a first reaches the
rival's best curve BLEU, over the training at which the rival reached it. Each rival and each axis (`metric`, and
`also`'s) is a part: it holds if the ratio's interval over seeds lies below 1, is contradicted if it lies above 1
or if a never reached the rival's best in any seed, inconclusive otherwise (one seed: inconclusive); the claim
combines its parts as a value claim does. The curves are read from MLflow (the report passes its store).
"""

from __future__ import annotations

import math

import pandas as pd

from harness import logged
from harness.report.claim_kinds.registry import NOT_RUN, ClaimKind, combine, num3, register
from harness.report.stats import interval
from harness.report.stopping import diverged_why

# A "sooner" claim's axes: training seconds, or counted training FLOPs, to reach a rival's best dev BLEU (read
# from the curve_bleu measurement's curves, harness/report/rivals.py: axis 1 and axis 0 of a curve's points).
SOONER_AXES = {"seconds_to_rival_best": 1, "flops_to_rival_best": 0}


def curves_by_seed(runs: pd.DataFrame, uri: str, row: str) -> dict[int, list[tuple[float, float, float]]]:
    """Per finished seed of `row`, its dev BLEU curve as (training FLOPs, training seconds, BLEU) points: the
    curve_bleu rows the loop logged, FLOPs = the row's counted FLOPs per target token x the tokens seen."""
    out = {}
    done = runs[(runs["tags.row"].astype(str) == row) & (runs["status"] == "FINISHED")]
    for _, run in done.iterrows():
        per_token = run.get("metrics.flops_per_target_token")
        if per_token is None or pd.isna(per_token):
            continue
        hist = {k: dict(logged.metric_history(uri, run["run_id"], k)) for k in ("curve_bleu", "curve_tokens",
                                                                                "curve_seconds")}
        steps = sorted(set(hist["curve_bleu"]) & set(hist["curve_tokens"]) & set(hist["curve_seconds"]))
        if steps:
            out[int(run["tags.seed"])] = [(per_token * hist["curve_tokens"][s], hist["curve_seconds"][s],
                                           hist["curve_bleu"][s]) for s in steps]
    return out


def reached(curve: list[tuple[float, float, float]], bleu: float, axis: int) -> float:
    """Where a curve first reaches `bleu` on axis 0 (FLOPs, interpolated in log FLOPs) or 1 (seconds): between
    the last point below it and the first at or above it; NaN if it never does."""
    pts = sorted(curve, key=lambda p: p[axis])
    for i, p in enumerate(pts):
        if p[2] >= bleu:
            if i == 0 or pts[i - 1][2] >= p[2]:
                return p[axis]
            (x0, y0), (x1, y1) = (pts[i - 1][axis], pts[i - 1][2]), (p[axis], p[2])
            f = (bleu - y0) / (y1 - y0)
            if axis == 0 and x0 > 0:
                return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))
            return x0 + f * (x1 - x0)
    return float("nan")


def sooner(base: dict[int, list], rival: dict[int, list], axis: int) -> dict[int, tuple[float, float, float]]:
    """Seed by seed (the seeds both rows logged a curve for): the rival's best curve BLEU, the training (FLOPs on
    axis 0, seconds on axis 1) at which the rival first reached it, and at which the base first reached it (NaN:
    never)."""
    out = {}
    for seed in sorted(set(base) & set(rival)):
        best = max(p[2] for p in rival[seed])
        out[seed] = (best, reached(rival[seed], best, axis), reached(base[seed], best, axis))
    return out


def _sooner_part(base: dict, rival: dict, axis: int) -> dict:
    """One rival on one axis: the ratio (a's training to reach the rival's best) / (the rival's) over seeds."""
    pairs = sooner(base, rival, axis)
    never = [s for s, (_, _, x_base) in pairs.items() if math.isnan(x_base)]
    ratios = [x_base / x_rival for _, x_rival, x_base in pairs.values() if not math.isnan(x_base) and x_rival > 0]
    mean, low, high, n = interval(ratios)
    if not pairs:
        verdict_ = "not run"
    elif len(never) == len(pairs):
        verdict_ = "contradicted"            # a never reached the rival's best
    elif never or n < 2:
        verdict_ = "inconclusive"
    else:
        verdict_ = "holds" if high < 1 else "contradicted" if low > 1 else "inconclusive"
    return {"verdict": verdict_, "n": len(pairs), "diff": mean, "low": low, "high": high, "never": len(never),
            "a_mean": interval(x for _, _, x in pairs.values())[0] if pairs else float("nan"),
            "b_mean": interval(x for _, x, _ in pairs.values())[0] if pairs else float("nan")}


def sooner_verdict(claim, curves: dict[str, dict[int, list]]) -> dict:
    """A sooner claim checked on {row: {seed: curve}} (curves_by_seed): every rival on every axis a part; the
    figures shown are those of the part with the largest ratio (a part where a never got there first)."""
    axes = [claim.metric] + ([claim.also["metric"]] if claim.also else [])
    base = curves.get(claim.a, {})
    parts = [{**_sooner_part(base, curves.get(r, {}), SOONER_AXES[m]), "row": r, "metric": m}
             for m in axes for r in claim.b]
    out = {"id": claim.id, "a": claim.a, "b": ", ".join(claim.b), "a_row": claim.a if base else None,
           "metric": claim.metric, "expect": claim.expect, "margin": 0.0, "parts": parts}
    ran = [p for p in parts if p["verdict"] != "not run"]
    if not base or not ran:
        return {**out, "b_row": None, **NOT_RUN}
    worst = max(ran, key=lambda p: (p["never"] > 0, p["diff"] if not math.isnan(p["diff"]) else math.inf))
    return {**out, "b_row": worst["row"], "part_metric": worst["metric"],
            "verdict": combine([p["verdict"] for p in parts]), "n": min(p["n"] for p in ran), "diff": worst["diff"],
            "low": worst["low"], "high": worst["high"], "a_mean": worst["a_mean"], "b_mean": worst["b_mean"]}


class Sooner(ClaimKind):
    name = "sooner"
    reads_curves = True

    def validate(self, claim, metrics: dict) -> str | None:
        if not isinstance(claim.a, str) or not isinstance(claim.b, list) or not claim.b or \
                not all(isinstance(r, str) for r in claim.b):
            return "a sooner claim names one row as a and a list of rows as b"
        axes = [claim.metric] + ([claim.also.get("metric")] if claim.also else [])
        if any(m not in SOONER_AXES for m in axes) or (claim.also and list(claim.also) != ["metric"]):
            return f"a sooner claim's metric (and also's) must be one of {', '.join(SOONER_AXES)}"
        return None

    def judge(self, claim, values, curves) -> dict:
        return sooner_verdict(claim, {r: curves(r) for r in [claim.a, *claim.b]})

    def cells(self, c: dict) -> tuple[str, str, str]:
        ours = f"{c['a']} against {c['b']}"
        if c["b_row"]:
            unit = "seconds" if c["part_metric"].startswith("seconds") else "FLOPs"
            ours += (f": the slowest part, against {c['b_row']}, took {num3(c['a_mean'])} {unit} to reach its best "
                     f"where it took {num3(c['b_mean'])}")
        diff = ("–" if pd.isna(c["diff"]) else f"ratio {c['diff']:.3f}" if pd.isna(c["low"]) else
                f"ratio {c['diff']:.3f} [{c['low']:.3f}, {c['high']:.3f}]") + \
            f" (the largest part), n={c['n']}, below 1 to hold"
        return c["claim"].paper.get("finding", "–"), ours, diff

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        each = "; ".join(
            f"{p['row']} {p['metric'].split('_to_')[0]}: ratio {num3(p['diff'])}"
            + ("" if pd.isna(p["low"]) else f" [{num3(p['low'])}, {num3(p['high'])}]")
            + (f", never reached in {p['never']} of {p['n']} seeds" if p["never"] else "")
            + f" ({p['verdict']})" for p in c["parts"])
        rule = {"holds": "every ratio's interval lies below 1",
                "contradicted": f"{c['a_row']} needed more than a rival, or never reached its best",
                "inconclusive": "not every ratio's interval lies below 1 (one seed gives none)",
                "not run": ""}[c["verdict"]]
        return (f"{c['a_row']}'s training to reach each rival's best dev BLEU over the rival's own: {each}; "
                f"{rule}") + diverged_why(c, diag)

    def points_the_papers_way(self, c: dict) -> bool:
        return c["diff"] < 1


register(Sooner())
