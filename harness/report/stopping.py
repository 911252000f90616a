"""How each row's training ended, from its finished seeds: its final dev figures, whether its dev PPL was still
falling, which stopping rule (patience, target, budget) ended each seed, and seeds that diverged. Read by the
header's closing lines and by the claims write-up's "why" column."""

from __future__ import annotations

import math

import pandas as pd

from harness import logged
from harness.metrics import ending_step, ending_words, run_ending


def row_diagnostics(runs: pd.DataFrame, uri: str) -> dict[str, dict]:
    """Per row, from its finished seeds: final dev PPL (mean), and how much its dev PPL still fell over the
    last quarter of its steps (from the dev PPL logged every eval_every steps), as a fraction and the steps.
    Where the final score is of averaged checkpoints, the curve ends in the last weights' own dev PPL
    (dev_ppl_last): convergence is a question about the weights training reached, not about their average."""
    out: dict[str, dict] = {}
    done = runs[runs["status"] == "FINISHED"]
    for row, g in done.groupby(done["tags.row"].astype(str)):
        finals, drops, span, rose = [], [], None, []
        live_of = dict(zip(g["run_id"], g["metrics.dev_ppl_last"])) if "metrics.dev_ppl_last" in g else {}
        for run in g.itertuples(index=False):
            hist = sorted(logged.metric_history(uri, run.run_id, "dev_ppl"))
            if not hist:
                continue
            last_step, last = hist[-1]
            finals.append(last)
            live = live_of.get(run.run_id)
            if live is not None and pd.notna(live):   # averaged: the curve of the trained weights ends in theirs
                hist[-1] = (last_step, float(live))
                last = float(live)
            rose.append(last > min(v for _, v in hist) * 1.02)     # over-fitting: dev PPL up from its best
            later = [(s, v) for s, v in hist if s >= 0.75 * last_step and s < last_step]
            if later and last_step > 0:
                drops.append(1 - last / later[0][1])
                span = (later[0][0], last_step)
        out[row] = {"ppl": sum(finals) / len(finals) if finals else float("nan"),
                    "drop": sum(drops) / len(drops) if drops else float("nan"), "span": span,
                    "rose": sum(rose), "seeds": len(rose), "rule": _rule_outcomes(g), "diverged": diverged_seeds(g)}
    return out


def diverged_seeds(g: pd.DataFrame) -> tuple[int, int]:
    """(seeds that diverged under train.stop_diverged, seeds that trained with it) of a row's finished runs."""
    flags = pd.to_numeric(g.get("metrics.diverged", pd.Series(dtype=float)), errors="coerce").dropna()
    return int((flags == 1).sum()), len(flags)


def all_diverged(counts: tuple[int, int]) -> bool:
    """diverged_seeds' counts say every seed that trained with train.stop_diverged diverged (and some did)."""
    return counts[1] > 0 and counts[0] == counts[1]


def _final_metrics(r: pd.Series) -> dict:
    """A run's final metrics from its row of an MLflow runs table, by metric name (NaN where not logged)."""
    return {k[len("metrics."):]: v for k, v in r.items() if str(k).startswith("metrics.")}


def _rule_outcomes(g: pd.DataFrame) -> list[tuple[str, int, int]]:
    """Each finished seed's end under the patience rule (harness/train/patience.py), in seed order: (metrics.run_ending,
    the step it stopped at, or diverged at, its best step, the seed); [] where the rule was off."""
    if "metrics.stopped_by_rule" not in g:
        return []
    out = []
    order = pd.to_numeric(g["tags.seed"], errors="coerce") if "tags.seed" in g else pd.Series(0, index=g.index)
    for i, r in g.loc[order.sort_values(kind="stable").index].iterrows():
        m = _final_metrics(r)
        if pd.isna(m.get("stopped_by_rule")):
            continue                                                # the rule off in this seed
        how, last, seed = run_ending(m), m.get("steps"), order[i]
        stop = ending_step(m, how, 0 if last is None or pd.isna(last) else int(last))
        out.append((how, stop, int(m.get("best_step", 0) or 0), None if pd.isna(seed) else int(seed)))
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def stopping_summary(runs: pd.DataFrame) -> list[str]:
    """The provenance line of a study under the patience rule ([]: no finished trial trained under it): of the
    finished trials that did, how many the rule stopped (the share rounded down, so 89.96 % never reads as 90), how
    many hit the step budget, diverged or stopped otherwise (train.max_minutes), and of the rows how many it stopped
    in every finished seed (a diverged seed is one it did not stop)."""
    if "metrics.stopped_by_rule" not in runs:
        return []
    done = runs[(runs["status"] == "FINISHED") & runs["metrics.stopped_by_rule"].notna()]
    if done.empty:
        return []
    ends = pd.Series([run_ending(_final_metrics(r)) for _, r in done.iterrows()], index=done.index, dtype=object)
    rule, budget, diverged = ends == "rule", ends == "budget", ends == "diverged"
    other = int((ends == "time limit").sum())
    rows = rule.groupby(done["tags.row"].astype(str)).all()
    share = math.floor(1000 * rule.sum() / len(done)) / 10
    tail = [f"{int(budget.sum())} hit the step budget",
            *([f"{int(diverged.sum())} diverged"] if diverged.any() else []),
            *([f"{other} stopped otherwise (a time limit)"] if other else [])]
    return [f"- the patience rule stopped {int(rule.sum())} of the {_count(len(done), 'finished trial')} that trained "
            f"under it ({share:g} %); {', '.join(tail)}; it stopped every seed of {int(rows.sum())} of "
            f"{_count(len(rows), 'row')}"]


def stopping_notes(runs: pd.DataFrame) -> dict[str, str]:
    """Each row's `stopping_note` from its finished runs' final metrics alone (no curves read)."""
    done = runs[runs["status"] == "FINISHED"]
    diag = {row: {"rule": _rule_outcomes(g)} for row, g in done.groupby(done["tags.row"].astype(str))}
    return {row: stopping_note(row, diag) for row in diag}


def stopping_note(row: str, diag: dict[str, dict]) -> str:
    """How the row's seeds ended under the patience rule: "stopped by the rule at step S (best B)" for each, or
    "hit the budget of S steps while improving" (best at the last evaluation) or "... best at B", or stopped by
    its time limit ("": rule off)."""
    ends = diag.get(row, {}).get("rule") or []
    if not ends:
        return ""
    parts = [ending_words(how, stop, best) for how, stop, best, _ in ends]
    if len(set(how for how, _, _, _ in ends)) == 1 and len(ends) > 1:
        how = ends[0][0]
        steps = "/".join(str(s) for _, s, _, _ in ends)
        bests = "/".join(str(b) for _, _, b, _ in ends)
        return (f"stopped by the rule in every seed, at steps {steps} (best {bests})" if how == "rule" else
                f"stopped by its time limit in every seed, at steps {steps} (best {bests})" if how == "time limit" else
                f"diverged in every seed, at steps {steps}" if how == "diverged" else
                f"hit the budget in every seed ({steps} steps; best {bests})")
    seeds = [i if seed is None else seed for i, (_, _, _, seed) in enumerate(ends)]
    return "; ".join(f"seed {n}: {p}" for n, p in zip(seeds, parts)) if len(parts) > 1 else parts[0]


def regime_note(row: str, diag: dict[str, dict]) -> str:
    """Where a row stood when training stopped, from its dev PPL curve: on the plateau, still improving; under
    the patience rule, how each seed ended (`stopping_note`) instead of the curve's last quarter."""
    d, base = diag.get(row, {}), diag.get("base", {}).get("ppl", float("nan"))
    ppl, drop = d.get("ppl", float("nan")), d.get("drop", float("nan"))
    gone, of = d.get("diverged", (0, 0))
    if gone:                         # scored as its start: its curve says nothing of where training stood
        return f"stopped as diverged in {gone} of {of} seeds (scored as its dev PPL at the start)"
    if pd.notna(ppl) and pd.notna(base) and row != "base" and ppl > 2.5 * base:
        return f"near the plateau: dev PPL {ppl:.2f}, {ppl / base:.1f}x the base's"
    if d.get("rule"):
        return stopping_note(row, diag)
    if pd.notna(drop) and drop > 0.10 and d.get("span"):
        return f"still improving: dev PPL -{100 * drop:.0f} % from step {d['span'][0]} to {d['span'][1]}"
    return ""


def diverged_why(c: dict, diag: dict[str, dict]) -> str:
    """For a claim read off several rows (a gap between gaps): which of them diverged in every seed, and what the
    figure then measures ("" where none did)."""
    claim = c.get("claim")
    rows = [r for side in (getattr(claim, "a", None), getattr(claim, "b", None))
            for r in ([side] if isinstance(side, str) else side or [])]
    gone = [r for r in dict.fromkeys(rows) if all_diverged(diag.get(r, {}).get("diverged", (0, 0)))]
    if not gone:
        return ""
    return (f"; {' and '.join(gone)} stopped as diverged in every seed and {'is' if len(gone) == 1 else 'are'} "
            "scored as the start: a gap with a diverged row measures how far the other row trained from that "
            "start, not how far the diverged row fell behind")
