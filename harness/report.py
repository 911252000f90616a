"""MLflow -> pandas -> reports/<study>.md and .csv, plots, and reports/README.md (an index).

Reads only what the study runner logged (through harness.tracking, the one module that imports mlflow):
the latest invocation of a study, one line per row, seeds averaged. Where the study's table is in
harness/paper/tables.yaml (Table 3), the paper's values are printed beside ours, and both are also given as
deltas against the base row: at tiny scale on the made-up corpus only the direction and relative size of
each knob's effect can be compared with the paper, never the absolute numbers. Studies of Tables 1, 2 and 4
(the parent's `table` tag) are rendered in those tables' own layouts by harness/report_tables.py, which
shares this module's reading, header and writing helpers.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Iterable

import pandas as pd
# The object-oriented API, not pyplot: no global backend switch and no figure registry to leak; a bare
# Figure renders with the Agg canvas.
from matplotlib.figure import Figure

from . import claims, tracking
from .errors import UserError
from .paper import load_tables

# The paper's architecture columns (Table 3 header) -> the flattened params each trial logged.
ARCH_COLUMNS = {"N": "model.n_layers", "d_model": "model.d_model", "d_ff": "model.d_ff", "h": "model.n_heads",
                "d_k": "model.d_k", "d_v": "model.d_v", "P_drop": "model.p_drop",
                "eps_ls": "train.label_smoothing", "steps": "train.steps"}
# Our metric name -> the final metric logged by the trial.
METRICS = {"ppl": "dev_ppl", "bleu": "dev_bleu", "bleu_tok": "dev_bleu_tok"}
# Table 3's knob groups: rows that change one thing against the base, and the column that thing is in.
KNOBS = [("heads (A)", ("A1", "A2", "A3", "A4"), "h"), ("d_k (B)", ("B1", "B2"), "d_k"),
         ("depth (C1-C3)", ("C1", "C2", "C3"), "N"), ("width (C4, C5)", ("C4", "C5"), "d_model"),
         ("d_ff (C6, C7)", ("C6", "C7"), "d_ff"), ("dropout (D1, D2)", ("D1", "D2"), "P_drop"),
         ("label smoothing (D3, D4)", ("D3", "D4"), "eps_ls")]
# Params that differ between seeds, never between rows: not a row's "change" against the base.
_PER_SEED = {"train.seed", "data.seed"}
_PROVENANCE = "**Provenance:**"   # the line the index copies from each report


# ------------------------------------------------------------------------------------------ reading

def load_results(study: str, uri: str | None = None, profile: str | None = None) -> dict:
    """The latest invocation of `study` as tracking.study_results gives it; a UserError when absent."""
    uri = uri or tracking.tracking_uri()
    tracking.require_store(uri)
    try:
        results = tracking.study_results(uri, study, profile)
    except UserError:
        raise
    except Exception as err:  # an unreachable server, an unreadable file: one sentence, not a stack
        raise UserError(f"cannot read the MLflow tracking store {uri} ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200] if str(err) else ''}); start it or point "
                        "MLFLOW_TRACKING_URI elsewhere.") from None
    which = f"study {study}" + (f" with profile {profile}" if profile else "")
    if results is None:
        raise UserError(f"no runs of {which} in {uri}; run `python -m harness run studies/{study}.yaml"
                        f"{f' --profile {profile}' if profile else ''}` first.")
    if results["runs"].empty:
        raise UserError(f"the latest run of {which} (MLflow run {results['parent']['run_id']}) has no trials "
                        "yet; let it run or resume it with `python -m harness run ... --resume`.")
    return results


def table_name(parent: dict, study: str) -> str:
    """The paper table a study reproduces: the parent's `table` tag (the study file's `table:`), else its name."""
    return parent["tags"].get("table") or parent["params"].get("table") or study


def paper_table(parent: dict, study: str) -> dict | None:
    """The paper's table for this study (tables.yaml), or None (e.g. modern.yaml has no paper rows)."""
    table = load_tables().get(table_name(parent, study))
    return table if isinstance(table, dict) and "rows" in table else None


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column (params come back as strings); all-NaN when the runs never logged it."""
    if name not in df:
        return pd.Series(float("nan"), index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def row_order(runs: pd.DataFrame, paper_rows: Iterable[str] = (), declared: Iterable[str] = ()) -> list[str]:
    """The paper's row order, then the study file's (the parent's `rows` param), then first appearance."""
    seen = runs.sort_values("start_time", kind="stable")["tags.row"].astype(str).drop_duplicates().tolist()
    paper, declared = list(paper_rows), list(declared)
    big = len(paper) + len(declared) + len(seen)
    return sorted(seen, key=lambda r: (paper.index(r) if r in paper else big,
                                       declared.index(r) if r in declared else big, seen.index(r)))


def row_groups(runs: pd.DataFrame, order: Iterable[str]):
    """Per row, in `order`: (row, its runs, the FINISHED ones, the row's status, its failure reasons joined).
    Status: FINISHED (every seed), PARTIAL (some), FAILED (none finished, one failed), else the run's status."""
    names = runs["tags.row"].astype(str)
    for row in order:
        g = runs[names == row]
        done = g[g["status"] == "FINISHED"]
        status = ("FINISHED" if len(done) == len(g) else "PARTIAL" if len(done)
                  else "FAILED" if (g["status"] == "FAILED").any() else str(g["status"].iloc[0]))
        reasons = g["tags.failure_reason"].dropna().astype(str) if "tags.failure_reason" in g else []
        reason = " | ".join(dict.fromkeys(r.strip()[:300] for r in reasons if r.strip()))
        yield row, g, done, status, reason


def synthetic_data(runs: pd.DataFrame) -> bool:
    """Whether any trial trained on the made-up corpus (data.name synth) rather than real data."""
    return "params.data.name" in runs and bool((runs["params.data.name"] == "synth").any())


def declared_rows(parent: dict) -> list[str]:
    """The rows in the study file's order (the parent's `rows` param)."""
    return [r for r in str(parent["params"].get("rows", "")).split(",") if r]


def summarize(runs: pd.DataFrame, paper: dict | None = None, declared: Iterable[str] = ()) -> pd.DataFrame:
    """One line per row: architecture as run, mean and std (ddof=1) over FINISHED seeds, paper beside."""
    runs = runs.assign(row=runs["tags.row"].astype(str))
    paper_rows = paper["rows"] if paper else {}
    records = []
    for row, g, done, status, reason in row_groups(runs, row_order(runs, paper_rows, declared)):
        first = (done if len(done) else g).iloc[0]   # params are the same for every seed of a row
        rec = {"row": row, "status": status, "n_seeds": len(g), "n_finished": len(done)}
        rec.update({col: pd.to_numeric(first.get(f"params.{key}", "nan"), errors="coerce")
                    for col, key in ARCH_COLUMNS.items()})
        for name, key in METRICS.items():
            values = _col(done, f"metrics.{key}").dropna()
            rec[f"{name}_mean"], rec[f"{name}_std"] = values.mean(), values.std()  # NaN std for one seed
            mean, low, _, _ = claims.interval(values)
            rec[f"{name}_ci"] = mean - low             # half-width of the 95 % t-interval; NaN for one seed
        rec["params_M"] = _col(done, "metrics.params").mean() / 1e6
        rec["failure_reason"] = reason
        rec["_params"] = {k[len("params."):]: v for k, v in first.items() if k.startswith("params.") and pd.notna(v)}
        records.append(rec)
    table = pd.DataFrame.from_records(records)
    table["changes"] = _changes(table)
    table = table.drop(columns="_params")
    for name, key in METRICS.items():   # deltas against base, seed by seed: the comparison that survives the scale
        table[f"delta_{name}"], table[f"delta_{name}_ci"] = zip(*(_paired_delta(runs, row, key) for row in table["row"]))
    if paper:
        p = pd.DataFrame.from_dict(paper_rows, orient="index")
        for ours, theirs in (("paper_ppl", "ppl"), ("paper_bleu", "bleu"), ("paper_params_M", "params")):
            table[ours] = pd.to_numeric(table["row"].map(p[theirs]), errors="coerce")   # NaN: not in the paper
        for name in ("ppl", "bleu"):
            ref = p[name].get("base", float("nan"))
            table[f"paper_delta_{name}"] = table[f"paper_{name}"] - float(ref)
    notes = ["changes", "failure_reason"]   # free text last, after the numbers
    return table[[c for c in table.columns if c not in notes] + notes]


def _paired_delta(runs: pd.DataFrame, row: str, key: str) -> tuple[float, float]:
    """(mean, 95 % half-width) of row - base over the seeds both FINISHED; the half-width is NaN for one seed."""
    if row == "base":
        return 0.0, float("nan")
    done = runs[runs["status"] == "FINISHED"]
    col = f"metrics.{key}"
    if col not in done:
        return float("nan"), float("nan")
    by_seed = lambda r: dict(zip(done.loc[done["row"] == r, "tags.seed"].astype(int),   # noqa: E731
                                 pd.to_numeric(done.loc[done["row"] == r, col], errors="coerce")))
    a, b = by_seed(row), by_seed("base")
    mean, low, _, _ = claims.interval(a[s] - b[s] for s in sorted(set(a) & set(b)))
    return mean, mean - low


def _changes(table: pd.DataFrame) -> list[str]:
    """Model/train params a row changes against the base beyond the printed columns (e.g. row E's
    positional=learned, modern rows' norm or ffn), so rows that print alike can be told apart."""
    base = table.loc[table["row"] == "base", "_params"]
    if base.empty:
        return [""] * len(table)
    base, shown = base.iloc[0], set(ARCH_COLUMNS.values()) | _PER_SEED

    def implied(k: str, params: dict) -> bool:
        # Fields derived from printed ones: n_kv_heads follows n_heads, per-side depths follow n_layers.
        derived_from = {"model.n_kv_heads": "model.n_heads", "model.n_enc_layers": "model.n_layers",
                        "model.n_dec_layers": "model.n_layers"}
        return k in derived_from and params.get(k) == params.get(derived_from[k])
    return [", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(params.items())
                      if k.startswith(("model.", "train.")) and k not in shown and base.get(k) != v
                      and not implied(k, params))
            for params in table["_params"]]


# ------------------------------------------------------------------------------------------ writing

def _atomic_write(path: Path, data: str | bytes) -> Path:
    """Temp file in the same directory, then rename: a reader never sees half a report."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)                   # mkstemp makes 0600; reports are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _save(fig: Figure, path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _num(x, fmt: str = "{:.2f}") -> str:
    return "–" if pd.isna(x) else fmt.format(x)


def _pm(mean, spread) -> str:
    """mean ± spread (a std or a 95 % half-width, as the table's caption says); the mean alone without one."""
    return _num(mean) if pd.isna(spread) else f"{mean:.2f} ± {spread:.2f}"


def _signed_pm(mean, half) -> str:
    return _signed(mean) if pd.isna(half) else f"{mean:+.2f} ± {half:.2f}"


def _signed(x) -> str:
    return _num(x, "{:+.2f}")


def provenance_line(parent: dict) -> str:
    tags = parent["tags"]
    dirty = " (dirty)" if str(tags.get("git_dirty", "")).lower() in ("true", "1", "yes") else ""
    return (f"{_PROVENANCE} `{tags.get('command', '?')}` · commit `{tags.get('git_sha', '?')}`{dirty} · "
            f"profile `{tags.get('profile', '?')}` · {tags.get('hardware', '?')} · {tags.get('started', '?')}")


def header_lines(study: str, results: dict, caption: str | None = None) -> list[str]:
    """The lines every report opens with: title (with the paper's caption), the do-not-edit note, the
    provenance line the index copies, then command, commit, profile, hardware, MLflow parent run, wall
    time and overhead share (and the sacreBLEU signature where BLEU was scored); ends with a blank line."""
    parent, runs = results["parent"], results["runs"]
    tags, metrics = parent["tags"], parent.get("metrics", {})
    wall, share = metrics.get("wall_seconds"), metrics.get("overhead_share")
    signatures = sorted(set(runs["tags.sacrebleu_signature"].dropna())) if "tags.sacrebleu_signature" in runs else []
    lines = [f"# {study}" + (f": {caption}" if caption else ""), "",
             "Generated from MLflow by `python -m harness report`; regenerate it, do not edit it.", "",
             provenance_line(parent), "",
             f"- command: `{tags.get('command', '?')}`",
             f"- git SHA: `{tags.get('git_sha', '?')}`, uncommitted changes: {tags.get('git_dirty', '?')}",
             f"- study version {tags.get('version', '?')}, profile `{tags.get('profile', '?')}`, "
             f"hardware: {tags.get('hardware', '?')}, started {tags.get('started', '?')}",
             f"- MLflow parent run `{parent['run_id']}` (experiment `{study}`, status {parent['status']}), "
             f"{tags.get('n_trials', len(runs))} trials, {tags.get('n_failed', '?')} failed",
             f"- wall time {_num(wall, '{:.0f}')} s, Ray + MLflow overhead share "
             f"{_num(None if share is None else 100 * share, '{:.1f}')} %"]
    if signatures:
        lines.append(f"- sacreBLEU signature: `{'`, `'.join(signatures)}`")
    lines.append("")
    return lines


def render_markdown(study: str, results: dict, table: pd.DataFrame, paper: dict | None, plots: list[Path],
                    claims_lines: list[str] = (), diag: dict | None = None) -> str:
    synth = results["parent"]["tags"].get("profile") == "tiny" or synthetic_data(results["runs"])
    lines = header_lines(study, results, paper["caption"] if paper else None)
    if paper:
        m = paper.get("metrics", {})
        lines += ["The paper's values come from harness/paper/tables.yaml (Vaswani et al. "
                  f"2017, arXiv:1706.03762 v7). Paper PPL: {m.get('ppl', '?')}. Paper BLEU: {m.get('bleu', '?')}. "
                  "Our `BLEU tok` follows that tokenized definition; our `BLEU sacre` is sacreBLEU (detokenized, 13a), "
                  "which reads lower than tokenized BLEU on the same output, so compare like with like.", ""]
    if synth:
        lines += ["This invocation used the made-up corpus (`data.name=synth`) and shrunken models, not WMT14 EN-DE: "
                  "absolute PPL and BLEU are not comparable with the paper; only the direction and relative size of "
                  "each row's effect are (the Δ columns, each against the base row).", ""]
    lines += ["Means ± the half-width of their 95 % Student-t interval over the seeds that FINISHED (no interval "
              "from one seed); `seeds` = finished / run. Δ columns are paired by seed: the mean of (row - base) "
              "over the seeds both finished, ± its own 95 % half-width. Architecture columns are the values "
              "actually run (from each trial's params).", ""]
    head = ["row", *ARCH_COLUMNS, "seeds", "dev PPL", "BLEU sacre", "BLEU tok", "params (M)", "Δ PPL", "Δ BLEU tok"]
    if paper:
        head += ["paper PPL", "paper BLEU", "paper params (M)", "paper Δ PPL", "paper Δ BLEU"]
    head.append("notes")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples(index=False):
        r = r._asdict()
        seeds = f"{r['n_finished']}/{r['n_seeds']}" + ("" if r["status"] == "FINISHED" else f" {r['status']}")
        failure = f"{r['status']}: {r['failure_reason']}" if r["failure_reason"] else ""
        notes = "; ".join(x for x in (r["changes"], failure, regime_note(r["row"], diag or {})) if x)
        cells = [f"**{r['row']}**", *(_num(r[c], "{:g}") for c in ARCH_COLUMNS), seeds,
                 _pm(r["ppl_mean"], r["ppl_ci"]), _pm(r["bleu_mean"], r["bleu_ci"]),
                 _pm(r["bleu_tok_mean"], r["bleu_tok_ci"]), _num(r["params_M"], "{:.3g}"),
                 _signed_pm(r["delta_ppl"], r["delta_ppl_ci"]), _signed_pm(r["delta_bleu_tok"], r["delta_bleu_tok_ci"])]
        if paper:
            cells += [_num(r["paper_ppl"]), _num(r["paper_bleu"], "{:.1f}"), _num(r["paper_params_M"], "{:g}"),
                      _signed(r["paper_delta_ppl"]), _signed(r["paper_delta_bleu"])]
        cells.append(notes.replace("|", "\\|").replace("\n", " "))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += claims_lines
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ claims

def row_diagnostics(runs: pd.DataFrame, uri: str) -> dict[str, dict]:
    """Per row, from its finished seeds: final dev PPL (mean), and how much its dev PPL still fell over the
    last quarter of its steps (from the dev PPL logged every eval_every steps), as a fraction and the steps."""
    out: dict[str, dict] = {}
    done = runs[runs["status"] == "FINISHED"]
    for row, g in done.groupby(done["tags.row"].astype(str)):
        finals, drops, span, rose = [], [], None, []
        for run in g.itertuples(index=False):
            hist = sorted(tracking.metric_history(uri, run.run_id, "dev_ppl"))
            if not hist:
                continue
            last_step, last = hist[-1]
            finals.append(last)
            rose.append(last > min(v for _, v in hist) * 1.02)     # over-fitting: dev PPL up from its best
            later = [(s, v) for s, v in hist if s >= 0.75 * last_step and s < last_step]
            if later and last_step > 0:
                drops.append(1 - last / later[0][1])
                span = (later[0][0], last_step)
        out[row] = {"ppl": sum(finals) / len(finals) if finals else float("nan"),
                    "drop": sum(drops) / len(drops) if drops else float("nan"), "span": span,
                    "rose": sum(rose), "seeds": len(rose)}
    return out


def _claim_value(metric: str, x: float) -> str:
    if pd.isna(x):
        return "–"
    if metric in ("nll", "test_nll"):
        return f"PPL {math.exp(x):.2f}"
    return f"{x:g}" if metric in ("seq_ops", "path") else f"{x:.2f}"      # counts as counts


def regime_note(row: str, diag: dict[str, dict]) -> str:
    """Where a row stood when training stopped, from its dev PPL curve: on the plateau, still improving."""
    d, base = diag.get(row, {}), diag.get("base", {}).get("ppl", float("nan"))
    ppl, drop = d.get("ppl", float("nan")), d.get("drop", float("nan"))
    if pd.notna(ppl) and pd.notna(base) and row != "base" and ppl > 2.5 * base:
        return f"near the plateau: dev PPL {ppl:.2f}, {ppl / base:.1f}x the base's"
    if pd.notna(drop) and drop > 0.10 and d.get("span"):
        return f"still improving: dev PPL -{100 * drop:.0f} % from step {d['span'][0]} to {d['span'][1]}"
    return ""


def _claim_why(c: dict, diag: dict[str, dict]) -> str:
    """What in the run's numbers explains a claim that does not hold (generated, never written by hand)."""
    if c["verdict"] == "holds":
        return ""
    if c["verdict"] == "not run":
        return "its rows were not run in this invocation"
    if c["expect"] == "value":
        off = f"{c['a_row']} measured {c['a_mean']:.2f}, {abs(c['diff']):.2f} from {c['b_mean']:g}"
        return (f"{off}: outside ±{c['margin']:g}; the row's notes in the table above say where its fit parts "
                "from the formula" if c["verdict"] == "contradicted" else
                f"{off}: its interval over seeds is neither inside nor wholly outside ±{c['margin']:g}")
    notes = []
    if c["n"] < 2:
        notes.append(f"{c['n']} paired seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)")
    for row in dict.fromkeys(r for r in (c["a_row"], c["b_row"]) if r):
        d = diag.get(row, {})
        if regime_note(row, diag):
            notes.append(f"{row} was {regime_note(row, diag)}")
        if d.get("seeds") and not d.get("rose") and c["claim"].regime == "over-fitting":
            notes.append(f"{row} did not over-fit: its dev PPL was at its lowest at the end in every seed")
    if c["n"] >= 2 and c["verdict"] == "inconclusive":
        if c["expect"] == "better":
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                         "spans 0: the effect, if any, is within the seed-to-seed spread at this scale")
        else:
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] is not inside ±{c['margin']:g}")
    if c["verdict"] == "contradicted":
        notes.append(f"{c['b_row']} is better than {c['a_row']} on every reading of the interval "
                     f"[{c['low']:+.3f}, {c['high']:+.3f}]" if c["expect"] == "better" else
                     f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies outside ±{c['margin']:g}")
    return "; ".join(notes)


def claims_section(study: str, runs: pd.DataFrame, uri: str) -> list[str]:
    """The report's closing "Claims" section: every claim of harness/paper/claims.yaml for this study, the
    paper's sentence and numbers, ours with the seed-paired interval, and the computed verdict."""
    checked = claims.check_claims(study, runs)
    if not checked:
        return []
    diag = row_diagnostics(runs, uri)
    counts = {v: sum(c["verdict"] == v for c in checked) for v in ("holds", "contradicted", "inconclusive", "not run")}
    lines = ["## Claims", "",
             f"Each claim of the paper (and, for the modern rows, of the paper behind each replacement) as written in "
             f"harness/paper/claims.yaml, checked on these runs: {counts['holds']} hold, {counts['contradicted']} "
             f"contradicted, {counts['inconclusive']} inconclusive, {counts['not run']} not run. A verdict is computed, "
             "never written: the difference between the two rows is taken seed by seed (oriented so that > 0 is the "
             "claimed direction) and its 95 % t-interval decides: holds if it lies above 0 (or inside the equivalence "
             "margin), contradicted if it lies below 0 (or wholly outside the margin), inconclusive if it spans 0. "
             "Perplexity claims are compared as ln PPL (nats per subword), so a difference of 0.05 is a PPL ratio of "
             "about 1.05.", "",
             "| claim | the paper says | paper | ours: a vs b | paired Δ (95 % CI), seeds | verdict | why, from the runs |",
             "|---|---|---|---|---|---|---|"]
    if any(c["expect"] == "value" for c in checked):
        lines[2] += (" A measurement claim (Table 1's columns) compares one row's measured value with the paper's "
                     "formula instead: Δ is measured - formula, and it holds if Δ lies within the stated tolerance "
                     "(with several seeds, if its interval does), contradicted otherwise.")
    for c in checked:
        claim = c["claim"]
        paper = claim.paper
        unit = "ln PPL" if claim.metric.endswith("nll") else claim.metric
        a_val, b_val = _claim_value(claim.metric, c["a_mean"]), _claim_value(claim.metric, c["b_mean"])
        if claim.expect == "value":      # one row's measurement against the formula
            paper_cell, ours = paper.get("formula", "–"), f"{c['a']}: {a_val} against {b_val}"
        else:
            paper_cell = (f"{paper['a']:g} vs {paper['b']:g} ({paper.get('metric', claim.metric)})" if paper else "–")
            ours = f"{c['a']}: {a_val} vs {c['b']}: {b_val}"
        diff = ("–" if pd.isna(c["diff"]) else f"{c['diff']:+.3f}" if pd.isna(c["low"]) else
                f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]") + f" {unit}, n={c['n']}"
        if claim.expect == "equivalent":
            diff += f", margin ±{claim.margin:g}"
        elif claim.expect == "value":
            diff += f", tolerance ±{claim.margin:g}"
        cells = [f"`{claim.id}` ({claim.source})", claim.text, paper_cell, ours, diff, f"**{c['verdict']}**",
                 _claim_why(c, diag)]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return lines + [""]


# ------------------------------------------------------------------------------------------ plots

def plot_learning_curves(study: str, runs: pd.DataFrame, order: list[str], uri: str, path: Path) -> Path:
    """Training loss (left) and dev PPL every eval_every steps (right, log scale), one colour per row, one
    line per seed: whether each row converged is read off the right panel."""
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2)
    colors = {row: f"C{i % 10}" for i, row in enumerate(order)}
    styles = ["-", "-.", ":", (0, (5, 1))]
    for j, row in enumerate(order):
        seeds = runs[runs["tags.row"].astype(str) == row]
        seeds = seeds.sort_values("status", key=lambda st: st != "FINISHED", kind="stable")  # legend: solid
        for i, run in enumerate(seeds.itertuples(index=False)):
            ok = run.status == "FINISHED"   # unfinished seeds dashed: they are not in the table's means
            for ax, key in zip(axes, ("train_loss", "dev_ppl")):
                hist = tracking.metric_history(uri, run.run_id, key)
                if hist:
                    steps, values = zip(*sorted(hist))
                    ax.plot(steps, values, color=colors[row], ls=styles[j // 10 % len(styles)] if ok else "--",
                            lw=1, marker="." if key == "dev_ppl" else None, ms=3, label=row if i == 0 else None)
    axes[0].set(xlabel="training step", ylabel="train loss (label-smoothed)", title=f"{study}: training loss")
    axes[1].set(xlabel="training step", ylabel="dev PPL (log scale)", yscale="log",
                title=f"{study}: dev perplexity during training")
    if axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_bleu_vs_params(study: str, table: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    ok = table.dropna(subset=["params_M", "bleu_mean"])
    ax.errorbar(ok["params_M"], ok["bleu_mean"], yerr=ok["bleu_std"].fillna(0), fmt="o", capsize=3)
    for r in ok.itertuples(index=False):
        ax.annotate(r.row, (r.params_M, r.bleu_mean), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set(xlabel="parameters (M)", ylabel="dev BLEU (sacreBLEU)", title=f"{study}: dev BLEU against size (ours)")
    return _save(fig, path)


def plot_knobs(study: str, table: pd.DataFrame, path: Path) -> Path:
    """One column of panels per Table 3 knob group present (BLEU above, PPL below), ours on the left axis
    and the paper's on a right axis: their scales differ, their slopes are what compare."""
    present = set(table["row"])
    groups = [(title, [r for r in ("base", *rows) if r in present], col)
              for title, rows, col in KNOBS if present & set(rows)]
    if not groups:   # no knob rows (e.g. modern.yaml): bars per row
        fig = Figure(figsize=(max(5, 0.7 * len(table)), 5))
        axes = fig.subplots(2, 1, sharex=True)
        for ax, (name, label) in zip(axes, (("bleu_tok", "dev BLEU tok"), ("ppl", "dev PPL"))):
            ax.bar(table["row"], table[f"{name}_mean"].fillna(0), yerr=table[f"{name}_std"].fillna(0), capsize=3)
            ax.set_ylabel(label)
        axes[0].set_title(f"{study}: dev BLEU and PPL per row (ours)")
        return _save(fig, path)
    fig = Figure(figsize=(3 * len(groups), 5.5), layout="constrained")
    axes = fig.subplots(2, len(groups), squeeze=False)
    for j, (title, rows, col) in enumerate(groups):
        sub = table.set_index("row").loc[rows].sort_values(col)
        x = range(len(sub))
        labels = [(f"{col}={v:g}\n{r}" if pd.notna(v) else r) + ("" if s == "FINISHED" else f"\n{s}")
                  for r, v, s in zip(sub.index, sub[col], sub["status"])]
        for i, (name, paper_col, label) in enumerate((("bleu_tok", "paper_bleu", "dev BLEU tok"),
                                                      ("ppl", "paper_ppl", "dev PPL"))):
            ax = axes[i, j]
            ax.errorbar(x, sub[f"{name}_mean"], yerr=sub[f"{name}_std"].fillna(0), fmt="o-", color="C0",
                        capsize=3, label="ours")
            if paper_col in sub and sub[paper_col].notna().any():
                twin = ax.twinx()
                twin.plot(x, sub[paper_col], "s--", color="C1", mfc="none", label="paper")
                twin.tick_params(labelsize=7, colors="C1")
            ax.set_xticks(list(x), labels if i == 1 else [""] * len(labels), fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
            if j == 0:
                ax.set_ylabel(f"{label} (ours, ●)", fontsize=8)
        axes[0, j].set_title(title, fontsize=9)
    fig.suptitle(f"{study}: one knob at a time (paper on the right axis, □)", fontsize=10)
    return _save(fig, path)


# ------------------------------------------------------------------------------------------ entry points

def write_index(out_dir: Path) -> Path:
    """reports/README.md: every <study>.md present in out_dir with its provenance line."""
    lines = ["# Reports", "", "Generated by `python -m harness report` from the MLflow store; each report names the "
             "command, commit, profile, hardware and date of the runs it shows. Do not edit by hand.", ""]
    for md in sorted(p for p in out_dir.glob("*.md") if p.name != "README.md"):
        prov = next((ln[len(_PROVENANCE):].strip() for ln in md.read_text(encoding="utf-8").splitlines()
                     if ln.startswith(_PROVENANCE)), "(no provenance line)")
        lines.append(f"- [{md.stem}]({md.name}) ([csv]({md.stem}.csv)): {prov}")
    return _atomic_write(out_dir / "README.md", "\n".join(lines) + "\n")


def write_report(study: str, out_dir: Path = Path("reports"), uri: str | None = None,
                 profile: str | None = None) -> list[Path]:
    """Write <study>.md, <study>.csv, its PNGs and the refreshed README.md index; return their paths.
    Tables 1, 2 and 4 are rendered by harness.report_tables in the paper's layout; any other study
    (Table 3, modern.yaml) as Table 3 is."""
    uri = uri or tracking.tracking_uri()
    results = load_results(study, uri, profile)
    parent, runs = results["parent"], results["runs"]
    out_dir = Path(out_dir)
    from .report_tables import WRITERS   # imports this module: imported here, not at the top
    writer = WRITERS.get(table_name(parent, study))
    if writer is not None:   # Tables 1, 2 and 4 have layouts of their own; everything else is Table 3's
        out_dir.mkdir(parents=True, exist_ok=True)
        return [*writer(study, results, uri, out_dir), write_index(out_dir)]
    paper = paper_table(parent, study)
    table = summarize(runs, paper, declared_rows(parent))
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [plot_learning_curves(study, runs, table["row"].tolist(), uri, out_dir / f"{study}_learning_curves.png"),
             plot_bleu_vs_params(study, table, out_dir / f"{study}_bleu_vs_params.png"),
             plot_knobs(study, table, out_dir / f"{study}_knobs.png")]
    csv = _atomic_write(out_dir / f"{study}.csv", table.round(4).to_csv(index=False))
    md = _atomic_write(out_dir / f"{study}.md", render_markdown(study, results, table, paper, plots,
                                                               claims_section(study, runs, uri),
                                                               row_diagnostics(runs, uri)))
    return [md, csv, *plots, write_index(out_dir)]


def report_all(out_dir: Path = Path("reports"), uri: str | None = None, studies: Iterable[str] | None = None,
               profile: str | None = None) -> list[Path]:
    """Reports for several studies (default: every study in the store); studies with no runs (of this
    profile) are skipped, and nothing at all to report is an error."""
    uri = uri or tracking.tracking_uri()
    if studies is None:
        studies = tracking.list_studies(uri)
    paths: list[Path] = []
    for study in studies:
        try:
            paths += write_report(study, out_dir, uri, profile)
        except UserError as err:
            if not str(err).startswith(("no runs of", "the latest run of")):
                raise
    if not paths:
        raise UserError(f"no study in {uri} has runs{f' with profile {profile}' if profile else ''}; "
                        "run `python -m harness run studies/NAME.yaml` first.")
    return list(dict.fromkeys(paths))   # the index is rewritten after each study: list it once
