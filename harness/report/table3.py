"""Table 3 in the paper's layout: variations on the base model, one knob at a time, each row with its
architecture and training columns, dev PPL and both BLEUs over seeds, the paper's values beside and
seed-paired deltas against base (MLflow -> reports/<study>.md, .csv, PNGs). The per-row summary, the BLEU
against size plot and the bars are the rows layout's (rows.py), which studies without a paper table use."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd
from matplotlib.figure import Figure

from harness.paper import columns, load_tables
from harness.report.cells import num, signed
from harness.report.claims_section import claims_section
from harness.report.curves import plot_learning_curves, plot_title
from harness.report.files import save_png, write_files
from harness.report.header import header_lines
from harness.report.results import column, declared_rows, row_order, synthetic_data, table_name
from harness.report.rows import notes_last, plot_bleu_vs_params, plot_rows, row_cells, summarize_rows
from harness.report.sections import architecture_section, measurement_sections
from harness.report.stopping import row_diagnostics

# The paper's architecture columns (Table 3 header) -> the flattened params each trial logged.
ARCH_COLUMNS = columns("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "steps")


# Table 3's knob groups: rows that change one thing against the base, and the column that thing is in.
KNOBS = [("heads (A)", ("A1", "A2", "A3", "A4"), "h"), ("d_k (B)", ("B1", "B2"), "d_k"),
         ("depth (C1-C3)", ("C1", "C2", "C3"), "N"), ("width (C4, C5)", ("C4", "C5"), "d_model"),
         ("d_ff (C6, C7)", ("C6", "C7"), "d_ff"), ("dropout (D1, D2)", ("D1", "D2"), "P_drop"),
         ("label smoothing (D3, D4)", ("D3", "D4"), "eps_ls")]
# Rows compared with another row than the base, where that row ran: the dropout rows with Dbase, the base
# trained on their own (in the tiny profile smaller) training set.
REFERENCE = {"D1": "Dbase", "D2": "Dbase"}


def reference(row: str, present) -> str:
    """The row that `row` is measured against: its REFERENCE where that ran, else the base."""
    ref = REFERENCE.get(row)
    return ref if ref in present else "base"


def paper_table(parent: dict, study: str) -> dict | None:
    """The paper's table for this study (tables.yaml), or None (e.g. modern.yaml has no paper rows)."""
    table = load_tables().get(table_name(parent, study))
    return table if isinstance(table, dict) and "rows" in table else None


def summarize(runs: pd.DataFrame, paper: dict | None = None, declared: Iterable[str] = ()) -> pd.DataFrame:
    """One line per row (rows.summarize_rows) with the paper's architecture columns as run, the D rows measured
    against Dbase where it ran, and the paper's values beside."""
    paper_rows = paper["rows"] if paper else {}
    table = summarize_rows(runs, row_order(runs, paper_rows, declared), ARCH_COLUMNS, reference)
    if paper:
        p = pd.DataFrame.from_dict(paper_rows, orient="index")
        for ours, theirs in (("paper_ppl", "ppl"), ("paper_bleu", "bleu"), ("paper_params_M", "params")):
            table[ours] = pd.to_numeric(table["row"].map(p[theirs]), errors="coerce")   # NaN: not in the paper
        for name in ("ppl", "bleu"):
            ref = p[name].get("base", float("nan"))
            table[f"paper_delta_{name}"] = table[f"paper_{name}"] - float(ref)
    return notes_last(table)


def render_markdown(study: str, results: dict, table: pd.DataFrame, paper: dict | None,
                    diag: dict | None = None) -> list[str]:
    """The report's lines above its plots: the header, the paper's notes, the rows table with its columns."""
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
    averaged = sorted({int(v) for v in column(results["runs"], "params.train.average_last").dropna() if v > 0})
    if averaged:   # the paper's Table 3 averages nothing (its caption); say where this invocation did
        lines += [f"Each row here is scored on the mean of its last {' or '.join(map(str, averaged))} checkpoints "
                  "(`train.average_last`, a DEVIATION of the small profile: studies/table3.yaml says why), where "
                  "the paper's Table 3 averages none; the convergence notes read the last weights' own dev PPL "
                  "(`dev_ppl_last`), so averaging does not pass for training.", ""]
    lines += ["Means ± the half-width of their 95 % Student-t interval over the seeds that FINISHED (no interval "
              "from one seed); `seeds` = finished / run. Δ columns are paired by seed: the mean of (row - base) "
              "(D1 and D2: row - Dbase, the base on their training set, where it ran) over the seeds both finished, "
              "± its own 95 % half-width. Architecture columns are the values "
              "actually run (from each trial's params).", ""]
    head = ["row", *ARCH_COLUMNS, "seeds", "dev PPL", "BLEU sacre", "BLEU tok", "params (M)", "Δ PPL", "Δ BLEU tok"]
    if paper:
        head += ["paper PPL", "paper BLEU", "paper params (M)", "paper Δ PPL", "paper Δ BLEU"]
    head.append("notes")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples(index=False):
        r = r._asdict()
        seeds, figures, notes = row_cells(r, diag or {})
        cells = [f"**{r['row']}**", *(num(r[c], "{:g}") for c in ARCH_COLUMNS), seeds, *figures]
        if paper:
            cells += [num(r["paper_ppl"]), num(r["paper_bleu"], "{:.1f}"), num(r["paper_params_M"], "{:g}"),
                      signed(r["paper_delta_ppl"]), signed(r["paper_delta_bleu"])]
        cells.append(notes)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def paper_base_at(sub: pd.DataFrame, ref: str, table: pd.DataFrame) -> bool:
    """Give the knob group's reference row `ref` in `sub` (indexed by row) the paper's base values where `ref` is
    not a paper row but stands for the base (Dbase) and the base ran; whether it did."""
    cols = ["paper_ppl", "paper_bleu"]
    base = table.set_index("row")
    if ref == "base" or "base" not in base.index or not set(cols) <= set(sub.columns):
        return False
    if sub.loc[ref, cols].notna().any():        # a paper row of its own
        return False
    sub.loc[ref, cols] = base.loc["base", cols].to_numpy(dtype=float)
    return True


def plot_knobs(study: str, table: pd.DataFrame, path: Path, title: str | None = None) -> Path | None:
    """One column of panels per Table 3 knob group present (BLEU above, PPL below), ours on the left axis
    and the paper's on a right axis: their scales differ, their slopes are what compare. Where a group's reference
    is not a paper row (Dbase, the base on the dropout rows' training set) the paper's line takes the paper's base
    there, the row that the paper measured its own D rows against, and the panel's title says so."""
    present = set(table["row"])
    groups = [(name, [r for r in (reference(rows[0], present), *rows) if r in present], col)
              for name, rows, col in KNOBS if present & set(rows)]
    if not groups:   # no knob rows (e.g. `--rows base,E`): bars per row
        return plot_rows(study, table, path, title)
    fig = Figure(figsize=(3 * len(groups), 5.5), layout="constrained")
    axes = fig.subplots(2, len(groups), squeeze=False)
    for j, (group, rows, col) in enumerate(groups):
        sub = table.set_index("row").loc[rows].sort_values(col)
        stand_in = paper_base_at(sub, rows[0], table)
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
        axes[0, j].set_title(f"{group}\npaper: its base at {rows[0]}" if stand_in else group, fontsize=9)
    fig.suptitle(f"{title or study}: one knob at a time (paper on the right axis, □)", fontsize=10)
    return save_png(fig, path)


def write_table3(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    """Table 3's layout: one line per row with its architecture and training columns, dev PPL and both BLEUs
    as mean ± 95 % half-width over seeds, the paper's values beside, and seed-paired deltas against base."""
    parent, runs = results["parent"], results["runs"]
    paper = paper_table(parent, study)
    table = summarize(runs, paper, declared_rows(parent))
    title = plot_title(study, runs)
    plots = [p for p in (plot_learning_curves(study, runs, table["row"].tolist(), uri,
                                              out_dir / f"{study}_learning_curves.png"),
                         plot_bleu_vs_params(study, table, out_dir / f"{study}_bleu_vs_params.png", title),
                         plot_knobs(study, table, out_dir / f"{study}_knobs.png", title)) if p is not None]
    # The sections of the measurements the rows took (harness/measure: the heads probe, length buckets, attention
    # statistics, source attention, ...), before the claims.
    extra, extra_plots = measurement_sections(runs, table["row"].tolist(), uri, out_dir, study)
    lines = render_markdown(study, results, table, paper, row_diagnostics(runs, uri))
    tail = [*architecture_section(runs, table["row"].tolist()), *extra, *claims_section(study, runs, uri, parent)]
    return write_files(study, out_dir, lines, table, plots, tail) + extra_plots
