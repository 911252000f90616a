"""The paper's claims (harness/paper/claims.yaml) checked against a study's runs: per-row means with 95 %
intervals over seeds, seed-paired differences with their own intervals, and a verdict computed from them.

Plain Python and pandas: reports import this, and reports never import torch or the model.

Statistics. A row's value is the mean over its finished seeds, with a two-sided 95 % Student-t interval
(mean ± t(0.975, n-1) · s / sqrt(n), harness/report/stats.py). What a claim expects of its rows (`expect:`) is its
kind, one class each in harness/report/claim_kinds/ (better, equivalent, value, above, gap_grows, sooner): the
kind checks that the claim is well formed and computes its verdict, which holds, is contradicted or is
inconclusive by where an interval over seeds lies. One seed gives no interval, so a comparison from one seed is
inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from harness.io import load_yaml
from harness.measure.registry import claim_metrics
from harness.metrics import claim_metrics as core_claim_metrics

# The built-in claim kinds register themselves on import, in this (alphabetical) order, which is the order of
# their notes in a report's claims paragraph.
from harness.report.claim_kinds import above, check, compare, gap, sooner, value  # noqa: F401
from harness.report.claim_kinds.registry import kind_of
from harness.report.claim_kinds.sooner import SOONER_AXES, curves_by_seed
from harness.report.shares import fade_per_run, positions

CLAIMS = Path(__file__).parents[1] / "paper" / "claims.yaml"
CHECKS = Path(__file__).parents[1] / "paper" / "checks.yaml"   # the checks of the implementation, apart
# Metric name in claims.yaml -> (the final MLflow metric, transform), from harness/metrics.py's table and the
# measurements' (harness/measure: agreement, source attention, length buckets, heads). nll: ln(PPL), so that
# differences are ratios of perplexity and seeds average on the scale the loss is trained on.
CORE_METRICS = core_claim_metrics()


def metrics() -> dict[str, tuple[str, str | None]]:
    """Every metric a claim can name: {claims.yaml key: (the final MLflow metric, transform)}."""
    return {**CORE_METRICS, **claim_metrics(), **{k: ("curve_bleu", "curve") for k in SOONER_AXES}}


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
    moved: str = ""       # a check that was a claim: when it moved to checks.yaml and why (the report says so)


def _read(path: Path, checks: bool) -> list[Claim]:
    """The entries of claims.yaml (checks False) or checks.yaml (checks True), each checked by its kind: a wrong
    key or value names the entry and what is allowed. A check's kind is "check" whether or not it says so."""
    raw = load_yaml(path.read_text(encoding="utf-8"))
    out = []
    METRICS = metrics()
    noun = "check" if checks else "claim"
    for i, item in enumerate(raw["checks" if checks else "claims"]):
        where = f"{path}: {noun} {item.get('id', i)}"
        try:
            claim = Claim(**({"expect": "check", **item} if checks else item))
        except TypeError as err:
            raise ValueError(f"{where}: {err}") from None
        if claim.metric not in METRICS:
            raise ValueError(f"{where}: metric {claim.metric!r} is not one of {', '.join(METRICS)}")
        try:
            kind = kind_of(claim.expect)
            wrong = kind.validate(claim, METRICS)
            if kind.is_check != checks:
                wrong = (f"expect {claim.expect!r} is a check of the implementation: it belongs in {CHECKS.name}"
                         if kind.is_check else f"a check's kind is check, not {claim.expect!r}")
        except ValueError as err:          # an unknown kind
            wrong = str(err)
        if wrong:
            raise ValueError(f"{where}: {wrong}")
        out.append(claim)
    return out


@lru_cache(maxsize=1)
def load_claims() -> tuple[Claim, ...]:
    """Every claim of claims.yaml, checked: a wrong key or value names the claim and what is allowed."""
    out = _read(CLAIMS, checks=False)
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{CLAIMS}: claim ids are not unique")
    return tuple(out)


@lru_cache(maxsize=1)
def load_checks() -> tuple[Claim, ...]:
    """Every check of checks.yaml (the statements the implementation decides by construction), checked as
    claims are; an id that a claim also has is refused."""
    out = _read(CHECKS, checks=True) if CHECKS.exists() else []
    ids = [c.id for c in out]
    taken = {c.id for c in load_claims()}
    if len(set(ids)) != len(ids) or taken & set(ids):
        raise ValueError(f"{CHECKS}: check ids are not unique, or are a claim's too")
    return tuple(out)


def claims_for(study: str) -> list[Claim]:
    return [c for c in load_claims() if c.study == study]


def checks_for(study: str) -> list[Claim]:
    return [c for c in load_checks() if c.study == study]


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
    for row, seed, x in zip(done["tags.row"].astype(str), done["tags.seed"], values):
        if pd.isna(x) or (transform == "log" and x <= 0):
            continue
        out.setdefault(row, {})[int(seed)] = math.log(x) if transform == "log" else float(x)
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


def check_claims(study: str, runs: pd.DataFrame, uri: str | None = None, checks: bool = False) -> list[dict]:
    """Every claim of `study` (with checks, every check of the implementation instead) judged against its runs by
    its kind, in the file's order (a kind that reads dev BLEU curves reads them from the MLflow store at `uri`;
    without one its claims are not run)."""
    cache: dict[str, dict] = {}

    def values(metric: str) -> dict[str, dict[int, float]]:
        return cache.setdefault(metric, per_seed(runs, metric)) if metric else {}

    def curves(row: str) -> dict[int, list]:
        return curves_by_seed(runs, uri, row) if uri else {}

    return [{**kind_of(claim.expect).judge(claim, values, curves), "claim": claim}
            for claim in (checks_for(study) if checks else claims_for(study))]


def too_few_seeds(checked: list[dict]) -> list[dict]:
    """The judged claims whose kind needs more seeds than their verdict had (a comparison or a threshold on fewer
    than 3): they cannot be decided, whatever they read."""
    return [c for c in checked if c["verdict"] != "not run" and c["n"] < kind_of(c["claim"].expect).needs_seeds]
