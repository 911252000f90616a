"""The paper's claims (harness/paper/claims.yaml) checked against a study's runs: per-row means with 95 %
intervals over seeds, seed-paired differences with their own intervals, and a verdict computed from them.

Plain Python and pandas: reports import this, and reports never import torch or the model.

Statistics. A row's value is the mean over its finished seeds, with a two-sided 95 % Student-t interval
(mean ± t(0.975, n-1) · s / sqrt(n)). A claim compares rows a and b seed by seed: d_s = a_s - b_s over the
seeds both finished, oriented so that d > 0 is the claimed direction, and the interval of mean(d) decides:
- "better": holds if the whole interval is above 0, contradicted if it is wholly below 0, else inconclusive
  (the interval spans 0); with a margin m > 0 ("better by more than m"), the same against m instead of 0;
- "equivalent" (margin m): holds if the interval lies inside [-m, m], contradicted if it lies wholly outside
  it, else inconclusive.
One seed gives no interval, so every comparison from one seed is inconclusive.

Measurement claims ("value", Table 1's complexity column): one row's measured value (a fitted exponent, a
count of sequential operations, a path length) against the paper's formula, a fixed `target` or the run's
own evaluation of the formula (`target_metric`), within a stated tolerance m: with one seed the value holds
if it lies within m of the target and is contradicted otherwise (a measurement, not a sample of a noisy
comparison); with several seeds their interval decides as for "equivalent". A value claim may name several rows
(`a: [rows]`, one statement measured at several shapes) and a second metric held to the same target (`also:
{metric}`): it holds if every row holds on every metric, is contradicted if any is, else inconclusive.

Time-to-quality claims ("sooner", Table 2's "trained significantly faster"): row a's dev BLEU curve against
each row of b (a list of rivals), seed by seed: the training (seconds, or counted FLOPs) at which a first reaches the
rival's best curve BLEU, over the training at which the rival reached it. Each rival and each axis (`metric`, and
`also`'s) is a part: it holds if the ratio's interval over seeds lies below 1, is contradicted if it lies above 1
or if a never reached the rival's best in any seed, inconclusive otherwise (one seed: inconclusive); the claim
combines its parts as a value claim does. The curves are read from MLflow (the report passes its store).

Interaction claims ("gap_grows", the depth study's): a = [x, y] and b = [u, v], seed by seed d = (x - y) - (u - v)
on the metric, oriented by `better` so that d > 0 is "x falls further behind y than u behind v" (e.g. post-norm's
deficit to pre-norm at 24 layers against at 6); its interval decides as for "better".

Threshold claims ("above", the heads probe's): one row's value per seed against a fixed `target` stated in
claims.yaml before the runs: holds if the interval of value - target lies above 0, contradicted if below,
inconclusive if it spans 0 (one seed: inconclusive, as for comparisons).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from harness import tracking
from harness.io import load_yaml
from harness.measure.registry import claim_metrics
from harness.metrics import claim_metrics as core_claim_metrics
from harness.report.shares import fade_per_run, positions

CLAIMS = Path(__file__).parents[1] / "paper" / "claims.yaml"
# Metric name in claims.yaml -> (the final MLflow metric, transform), from harness/metrics.py's table and the
# measurements' (harness/measure: agreement, source attention, length buckets, heads). nll: ln(PPL), so that
# differences are ratios of perplexity and seeds average on the scale the loss is trained on.
CORE_METRICS = core_claim_metrics()


# A "sooner" claim's axes: training seconds, or counted training FLOPs, to reach a rival's best dev BLEU (read
# from the curve_bleu measurement's curves, harness/report/rivals.py: axis 1 and axis 0 of a curve's points).
SOONER_AXES = {"seconds_to_rival_best": 1, "flops_to_rival_best": 0}


def metrics() -> dict[str, tuple[str, str | None]]:
    """Every metric a claim can name: {claims.yaml key: (the final MLflow metric, transform)}."""
    return {**CORE_METRICS, **claim_metrics(), **{k: ("curve_bleu", "curve") for k in SOONER_AXES}}


_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]   # two-sided 95 % quantiles of Student's t, df = 1..30 (then the normal's 1.960)


def t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.960


def interval(values) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of a 95 % t-interval; low = high = NaN for fewer than two values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = sum(xs) / n
    if n < 2:
        return mean, float("nan"), float("nan"), n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


@dataclass(frozen=True)
class Claim:
    id: str
    study: str
    source: str
    text: str
    metric: str
    a: object
    expect: str
    better: str = ""      # lower | higher: comparisons only
    b: object = None      # comparisons only
    margin: float = 0.0
    target: float | None = None     # value claims: the paper's number, or
    target_metric: str = ""         # value claims: the metric holding the run's own evaluation of the formula
    paper: dict = field(default_factory=dict)
    regime: str = ""      # where the claim can show at all, e.g. over-fitting (the report checks the runs were in it)
    # A second comparison of the same two rows that must hold as well, {metric, better}: "beats it at less
    # training cost" (Table 2). Holds if both parts hold, contradicted if either is, inconclusive otherwise.
    also: dict = field(default_factory=dict)


@lru_cache(maxsize=1)
def load_claims() -> tuple[Claim, ...]:
    """Every claim of claims.yaml, checked: a wrong key or value names the claim and what is allowed."""
    raw = load_yaml(CLAIMS.read_text(encoding="utf-8"))
    out = []
    METRICS = metrics()
    for i, item in enumerate(raw["claims"]):
        where = f"{CLAIMS}: claim {item.get('id', i)}"
        try:
            claim = Claim(**item)
        except TypeError as err:
            raise ValueError(f"{where}: {err}") from None
        if claim.metric not in METRICS:
            raise ValueError(f"{where}: metric {claim.metric!r} is not one of {', '.join(METRICS)}")
        if claim.expect == "value":
            rows_ok = isinstance(claim.a, str) or (isinstance(claim.a, list) and claim.a
                                                   and all(isinstance(r, str) for r in claim.a))
            if not rows_ok or claim.b is not None:
                raise ValueError(f"{where}: a value claim names a row (or a list of rows) as a and no b")
            if claim.also and (list(claim.also) != ["metric"] or claim.also["metric"] not in METRICS):
                raise ValueError(f"{where}: a value claim's also must be {{metric: one of {', '.join(METRICS)}}}")
            if (claim.target is None) == (not claim.target_metric):
                raise ValueError(f"{where}: a value claim needs exactly one of target and target_metric")
            if claim.target_metric and claim.target_metric not in METRICS:
                raise ValueError(f"{where}: target_metric {claim.target_metric!r} is not one of {', '.join(METRICS)}")
            if claim.margin < 0:
                raise ValueError(f"{where}: a value claim's margin (its tolerance) must not be negative")
            out.append(claim)
            continue
        if claim.expect == "sooner":
            if not isinstance(claim.a, str) or not isinstance(claim.b, list) or not claim.b or \
                    not all(isinstance(r, str) for r in claim.b):
                raise ValueError(f"{where}: a sooner claim names one row as a and a list of rows as b")
            axes = [claim.metric] + ([claim.also.get("metric")] if claim.also else [])
            if any(m not in SOONER_AXES for m in axes) or (claim.also and list(claim.also) != ["metric"]):
                raise ValueError(f"{where}: a sooner claim's metric (and also's) must be one of "
                                 f"{', '.join(SOONER_AXES)}")
            out.append(claim)
            continue
        if claim.expect == "gap_grows":
            pairs = (claim.a, claim.b)
            if not all(isinstance(x, list) and len(x) == 2 and all(isinstance(r, str) for r in x) for x in pairs) \
                    or claim.better not in ("lower", "higher"):
                raise ValueError(f"{where}: a gap_grows claim names two rows as a, two as b, and better: lower|higher")
            out.append(claim)
            continue
        if claim.expect == "above":
            if not isinstance(claim.a, str) or claim.b is not None or claim.target is None:
                raise ValueError(f"{where}: a threshold claim names one row as a, no b, and a target")
            out.append(claim)
            continue
        if claim.better not in ("lower", "higher") or claim.expect not in ("better", "equivalent"):
            raise ValueError(f"{where}: better must be lower|higher and expect better|equivalent|value|above")
        if claim.expect == "equivalent" and not claim.margin > 0:
            raise ValueError(f"{where}: an equivalence claim needs a margin > 0")
        if claim.margin < 0:
            raise ValueError(f"{where}: a margin must not be negative (better: by more than the margin)")
        if claim.also and (sorted(claim.also) != ["better", "metric"] or claim.also["metric"] not in METRICS
                           or claim.also["better"] not in ("lower", "higher") or claim.expect != "better"):
            raise ValueError(f"{where}: also must be {{metric: one of {', '.join(METRICS)}, better: lower|higher}}, "
                             "on a claim that expects better")
        for side in (claim.a, claim.b):
            if not (isinstance(side, str) or (isinstance(side, dict) and list(side) in (["best"], ["first"]))):
                raise ValueError(f"{where}: a and b must be a row, {{best: [rows]}} or {{first: [rows]}}")
        out.append(claim)
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{CLAIMS}: claim ids are not unique")
    return tuple(out)


def claims_for(study: str) -> list[Claim]:
    return [c for c in load_claims() if c.study == study]


def per_seed(runs: pd.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """{row: {seed: value}} for a claims metric over the FINISHED runs (nll = ln PPL; a fade computed from the
    runs' metrics by target position)."""
    key, transform = metrics()[metric]
    out: dict[str, dict[int, float]] = {}
    done = runs[runs["status"] == "FINISHED"]
    if transform == "fade":
        values = fade_per_run(done, key, positions(runs, key))
        if values is None:
            return out
    else:
        col = f"metrics.{key}"
        if col not in runs:
            return out
        values = pd.to_numeric(done[col], errors="coerce")
    for row, seed, value in zip(done["tags.row"].astype(str), done["tags.seed"], values):
        if pd.isna(value) or (transform == "log" and value <= 0):
            continue
        out.setdefault(row, {})[int(seed)] = math.log(value) if transform == "log" else float(value)
    return out


def rows_read(claim: Claim, ran: set[str]) -> set[str]:
    """Every row whose runs the claim's verdict reads, given the rows that ran: each row named on either side, in
    a list (a value claim's rows, a gap between gaps, the rivals a `sooner` claim races) or among `best` (the
    best is chosen from all of them); of a `first` list, the one the verdict takes (the first that ran)."""
    def side(spec) -> set[str]:
        if spec is None:
            return set()
        if isinstance(spec, str):
            return {spec}
        if isinstance(spec, list):
            return set().union(*(side(s) for s in spec))
        if "first" in spec:
            chosen = next((r for r in spec["first"] if r in ran), None)
            return {chosen} if chosen else set(spec["first"])
        return set(spec.get("best", ()))
    return side(claim.a) | side(claim.b)


def _side(spec, values: dict[str, dict[int, float]], better: str) -> tuple[str | None, str]:
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


def _within(low: float, high: float, m: float) -> str:
    """holds if [low, high] lies inside [-m, m], contradicted if wholly outside it, else inconclusive."""
    return "holds" if -m <= low and high <= m else "contradicted" if low > m or high < -m else "inconclusive"


def _paired(a: str, b: str, values: dict[str, dict[int, float]], better: str, expect: str = "better",
            margin: float = 0.0) -> dict:
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
        result = _within(low, high, margin)
    return {"verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[a][s] for s in seeds)[0] if n else float("nan"),
            "b_mean": interval(values[b][s] for s in seeds)[0] if n else float("nan")}


def verdict(claim: Claim, values: dict[str, dict[int, float]],
            also_values: dict[str, dict[int, float]] | None = None) -> dict:
    """The claim checked on {row: {seed: value}}: rows used, paired difference with its interval, verdict.
    A claim with `also` compares the same two rows on also_values too (its "also" entry), and holds only if
    both comparisons do."""
    a, a_label = _side(claim.a, values, claim.better)
    b, b_label = _side(claim.b, values, claim.better)
    out = {"id": claim.id, "a": a_label, "b": b_label, "a_row": a, "b_row": b, "metric": claim.metric,
           "expect": claim.expect, "margin": claim.margin}
    if a is None or b is None or a == b:
        return {**out, "verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"),
                "high": float("nan"), "a_mean": float("nan"), "b_mean": float("nan")}
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


def _value_part(claim: Claim, row: str, values: dict[str, dict[int, float]],
                targets: dict[str, dict[int, float]] | None) -> dict:
    """One row's measured value on one metric against the claim's target: value - target over seeds, its
    interval, and the part's verdict."""
    target_of = (lambda s: claim.target) if claim.target is not None else \
        (lambda s: (targets or {}).get(row, {}).get(s))
    seeds = [s for s in sorted(values.get(row, {})) if target_of(s) is not None]
    if not seeds:
        return {"row": row, "verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"),
                "high": float("nan"), "a_mean": float("nan"), "b_mean": float("nan")}
    mean, low, high, n = interval(values[row][s] - target_of(s) for s in seeds)
    # counts are compared exactly (margin 0), up to float rounding; a tolerance below 1e-6 is its own scale
    m = claim.margin + 1e-9 if claim.margin >= 1e-6 else claim.margin * (1 + 1e-9) or 1e-9
    result = _within(mean, mean, m) if n < 2 else _within(low, high, m)   # one measurement: its value decides
    return {"row": row, "verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[row][s] for s in seeds)[0], "b_mean": interval(target_of(s) for s in seeds)[0]}


def value_verdict(claim: Claim, values: dict[str, dict[int, float]],
                  targets: dict[str, dict[int, float]] | None = None,
                  also_values: dict[str, dict[int, float]] | None = None) -> dict:
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
        return {**out, "a_row": None, "verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"),
                "high": float("nan"), "a_mean": float("nan"), "b_mean": float("nan"), "parts": parts}
    verdicts = [p["verdict"] for p in parts]
    result = "holds" if all(v == "holds" for v in verdicts) else "contradicted" if "contradicted" in verdicts \
        else "inconclusive"
    worst = max(ran, key=lambda p: abs(p["diff"]))
    return {**out, "a_row": worst["row"], "part_metric": worst["metric"], "verdict": result,
            "n": min(p["n"] for p in ran), "diff": worst["diff"],
            "low": worst["low"], "high": worst["high"], "a_mean": worst["a_mean"], "b_mean": worst["b_mean"],
            "parts": parts if len(parts) > 1 else []}


def above_verdict(claim: Claim, values: dict[str, dict[int, float]]) -> dict:
    """A threshold claim checked: the row's value - target per seed, its interval, and the verdict."""
    a = claim.a if claim.a in values else None
    out = {"id": claim.id, "a": claim.a, "b": f"target {claim.target:g}", "a_row": a, "b_row": None,
           "metric": claim.metric, "expect": claim.expect, "margin": 0.0}
    seeds = sorted(values.get(a, {})) if a else []
    if not seeds:
        return {**out, "verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"),
                "high": float("nan"), "a_mean": float("nan"), "b_mean": float("nan")}
    mean, low, high, n = interval(values[a][s] - claim.target for s in seeds)
    result = "inconclusive" if n < 2 else "holds" if low > 0 else "contradicted" if high < 0 else "inconclusive"
    return {**out, "verdict": result, "n": n, "diff": mean, "low": low, "high": high,
            "a_mean": interval(values[a][s] for s in seeds)[0], "b_mean": float(claim.target)}


# ------------------------------------------------------------------------------------ dev BLEU curves (sooner)

def curves_by_seed(runs: pd.DataFrame, uri: str, row: str) -> dict[int, list[tuple[float, float, float]]]:
    """Per finished seed of `row`, its dev BLEU curve as (training FLOPs, training seconds, BLEU) points: the
    curve_bleu rows the loop logged, FLOPs = the row's counted FLOPs per target token x the tokens seen."""
    out = {}
    done = runs[(runs["tags.row"].astype(str) == row) & (runs["status"] == "FINISHED")]
    for _, run in done.iterrows():
        per_token = run.get("metrics.flops_per_target_token")
        if per_token is None or pd.isna(per_token):
            continue
        hist = {k: dict(tracking.metric_history(uri, run["run_id"], k)) for k in ("curve_bleu", "curve_tokens",
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


def sooner_verdict(claim: Claim, curves: dict[str, dict[int, list]]) -> dict:
    """A sooner claim checked on {row: {seed: curve}} (rivals.curves_by_seed): every rival on every axis a part;
    the figures shown are those of the part with the largest ratio (a part where a never got there first)."""
    axes = [claim.metric] + ([claim.also["metric"]] if claim.also else [])
    base = curves.get(claim.a, {})
    parts = [{**_sooner_part(base, curves.get(r, {}), SOONER_AXES[m]), "row": r, "metric": m}
             for m in axes for r in claim.b]
    out = {"id": claim.id, "a": claim.a, "b": ", ".join(claim.b), "a_row": claim.a if base else None,
           "metric": claim.metric, "expect": claim.expect, "margin": 0.0, "parts": parts}
    ran = [p for p in parts if p["verdict"] != "not run"]
    if not base or not ran:
        return {**out, "b_row": None, "verdict": "not run", "n": 0, "diff": float("nan"), "low": float("nan"),
                "high": float("nan"), "a_mean": float("nan"), "b_mean": float("nan")}
    verdicts = [p["verdict"] for p in parts]
    result = "holds" if all(v == "holds" for v in verdicts) else "contradicted" if "contradicted" in verdicts \
        else "inconclusive"
    worst = max(ran, key=lambda p: (p["never"] > 0, p["diff"] if not math.isnan(p["diff"]) else math.inf))
    return {**out, "b_row": worst["row"], "part_metric": worst["metric"], "verdict": result,
            "n": min(p["n"] for p in ran), "diff": worst["diff"],
            "low": worst["low"], "high": worst["high"], "a_mean": worst["a_mean"], "b_mean": worst["b_mean"]}


def gap_verdict(claim: Claim, values: dict[str, dict[int, float]]) -> dict:
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


def check_claims(study: str, runs: pd.DataFrame, uri: str | None = None) -> list[dict]:
    """Every claim of `study` checked against its runs, in claims.yaml's order (a sooner claim reads its rows'
    curves from the MLflow store at `uri`; without one it is not run)."""
    out = []
    cache: dict[str, dict] = {}
    for claim in claims_for(study):
        if claim.expect == "sooner":
            rows = [claim.a, *claim.b]
            curves = {r: curves_by_seed(runs, uri, r) for r in rows} if uri else {}
            out.append({**sooner_verdict(claim, curves), "claim": claim})
            continue
        values = cache.setdefault(claim.metric, per_seed(runs, claim.metric))
        if claim.expect == "above":
            out.append({**above_verdict(claim, values), "claim": claim})
        elif claim.expect == "gap_grows":
            out.append({**gap_verdict(claim, values), "claim": claim})
        elif claim.expect == "value":
            targets = cache.setdefault(claim.target_metric, per_seed(runs, claim.target_metric)) \
                if claim.target_metric else None
            also = cache.setdefault(claim.also["metric"], per_seed(runs, claim.also["metric"])) if claim.also else None
            out.append({**value_verdict(claim, values, targets, also), "claim": claim})
        else:
            also = cache.setdefault(claim.also["metric"], per_seed(runs, claim.also["metric"])) if claim.also else None
            out.append({**verdict(claim, values, also), "claim": claim})
    return out
