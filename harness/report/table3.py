"""Table 3 in the paper's layout: variations on the base model, one knob at a time, each row with its
architecture and training columns, dev PPL and both BLEUs over seeds, the paper's values beside and
seed-paired deltas against base (MLflow -> reports/<study>.md, .csv, PNGs). Studies with rows of the
same kind and no paper table of their own (studies/modern.yaml) use this layout too."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd
from matplotlib.figure import Figure

from harness.io import atomic_write
from harness.paper import columns, load_tables
from harness.report import claims
from harness.report.common import (
    _PER_SEED,
    METRICS,
    architecture_section,
    claims_section,
    column,
    declared_rows,
    header_lines,
    measurement_sections,
    num,
    plot_learning_curves,
    pm,
    regime_note,
    row_diagnostics,
    row_groups,
    row_order,
    save_png,
    signed,
    signed_pm,
    synthetic_data,
    table_name,
)

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
            values = column(done, f"metrics.{key}").dropna()
            rec[f"{name}_mean"], rec[f"{name}_std"] = values.mean(), values.std()  # NaN std for one seed
            mean, low, _, _ = claims.interval(values)
            rec[f"{name}_ci"] = mean - low             # half-width of the 95 % t-interval; NaN for one seed
        rec["params_M"] = column(done, "metrics.params").mean() / 1e6
        rec["failure_reason"] = reason
        rec["_params"] = {k[len("params."):]: v for k, v in first.items() if k.startswith("params.") and pd.notna(v)}
        records.append(rec)
    table = pd.DataFrame.from_records(records)
    table["changes"] = _changes(table)
    table = table.drop(columns="_params")
    present = set(table["row"])
    for name, key in METRICS.items():   # deltas against base, seed by seed: the comparison that survives the scale
        table[f"delta_{name}"], table[f"delta_{name}_ci"] = zip(*(_paired_delta(runs, row, key, reference(row, present))
                                                                  for row in table["row"]))
    if paper:
        p = pd.DataFrame.from_dict(paper_rows, orient="index")
        for ours, theirs in (("paper_ppl", "ppl"), ("paper_bleu", "bleu"), ("paper_params_M", "params")):
            table[ours] = pd.to_numeric(table["row"].map(p[theirs]), errors="coerce")   # NaN: not in the paper
        for name in ("ppl", "bleu"):
            ref = p[name].get("base", float("nan"))
            table[f"paper_delta_{name}"] = table[f"paper_{name}"] - float(ref)
    notes = ["changes", "failure_reason"]   # free text last, after the numbers
    return table[[c for c in table.columns if c not in notes] + notes]


def _paired_delta(runs: pd.DataFrame, row: str, key: str, ref: str = "base") -> tuple[float, float]:
    """(mean, 95 % half-width) of row - ref (the base) over the seeds both FINISHED; the half-width is NaN for
    one seed."""
    if row == ref:
        return 0.0, float("nan")
    done = runs[runs["status"] == "FINISHED"]
    col = f"metrics.{key}"
    if col not in done:
        return float("nan"), float("nan")
    by_seed = lambda r: dict(zip(done.loc[done["row"] == r, "tags.seed"].astype(int),   # noqa: E731
                                 pd.to_numeric(done.loc[done["row"] == r, col], errors="coerce")))
    a, b = by_seed(row), by_seed(ref)
    mean, low, _, _ = claims.interval(a[s] - b[s] for s in sorted(set(a) & set(b)))
    return mean, mean - low


def _changes(table: pd.DataFrame) -> list[str]:
    """Model/train/data params a row changes against the base beyond the printed columns (e.g. row E's
    positional=learned, modern rows' norm or ffn, the D rows' smaller training set in the tiny profile), so
    rows that print alike can be told apart."""
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
                      if k.startswith(("model.", "train.", "data.")) and k not in shown and base.get(k) != v
                      and not implied(k, params))
            for params in table["_params"]]


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
        seeds = f"{r['n_finished']}/{r['n_seeds']}" + ("" if r["status"] == "FINISHED" else f" {r['status']}")
        failure = f"{r['status']}: {r['failure_reason']}" if r["failure_reason"] else ""
        notes = "; ".join(x for x in (r["changes"], failure, regime_note(r["row"], diag or {})) if x)
        cells = [f"**{r['row']}**", *(num(r[c], "{:g}") for c in ARCH_COLUMNS), seeds,
                 pm(r["ppl_mean"], r["ppl_ci"]), pm(r["bleu_mean"], r["bleu_ci"]),
                 pm(r["bleu_tok_mean"], r["bleu_tok_ci"]), num(r["params_M"], "{:.3g}"),
                 signed_pm(r["delta_ppl"], r["delta_ppl_ci"]), signed_pm(r["delta_bleu_tok"], r["delta_bleu_tok_ci"])]
        if paper:
            cells += [num(r["paper_ppl"]), num(r["paper_bleu"], "{:.1f}"), num(r["paper_params_M"], "{:g}"),
                      signed(r["paper_delta_ppl"]), signed(r["paper_delta_bleu"])]
        cells.append(notes.replace("|", "\\|").replace("\n", " "))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += claims_lines
    return "\n".join(lines)


def plot_bleu_vs_params(study: str, table: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    ok = table.dropna(subset=["params_M", "bleu_mean"])
    ax.errorbar(ok["params_M"], ok["bleu_mean"], yerr=ok["bleu_std"].fillna(0), fmt="o", capsize=3)
    for r in ok.itertuples(index=False):
        ax.annotate(r.row, (r.params_M, r.bleu_mean), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set(xlabel="parameters (M)", ylabel="dev BLEU (sacreBLEU)", title=f"{study}: dev BLEU against size (ours)")
    return save_png(fig, path)


def plot_knobs(study: str, table: pd.DataFrame, path: Path) -> Path:
    """One column of panels per Table 3 knob group present (BLEU above, PPL below), ours on the left axis
    and the paper's on a right axis: their scales differ, their slopes are what compare."""
    present = set(table["row"])
    groups = [(title, [r for r in (reference(rows[0], present), *rows) if r in present], col)
              for title, rows, col in KNOBS if present & set(rows)]
    if not groups:   # no knob rows (e.g. modern.yaml): bars per row
        fig = Figure(figsize=(max(5, 0.7 * len(table)), 5))
        axes = fig.subplots(2, 1, sharex=True)
        for ax, (name, label) in zip(axes, (("bleu_tok", "dev BLEU tok"), ("ppl", "dev PPL"))):
            ax.bar(table["row"], table[f"{name}_mean"].fillna(0), yerr=table[f"{name}_std"].fillna(0), capsize=3)
            ax.set_ylabel(label)
        axes[0].set_title(f"{study}: dev BLEU and PPL per row (ours)")
        return save_png(fig, path)
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
    return save_png(fig, path)


def write_table3(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    """Table 3's layout: one line per row with its architecture and training columns, dev PPL and both BLEUs
    as mean ± 95 % half-width over seeds, the paper's values beside, and seed-paired deltas against base."""
    parent, runs = results["parent"], results["runs"]
    paper = paper_table(parent, study)
    table = summarize(runs, paper, declared_rows(parent))
    plots = [plot_learning_curves(study, runs, table["row"].tolist(), uri, out_dir / f"{study}_learning_curves.png"),
             plot_bleu_vs_params(study, table, out_dir / f"{study}_bleu_vs_params.png"),
             plot_knobs(study, table, out_dir / f"{study}_knobs.png")]
    # The sections of the measurements the rows took (harness/measure: the heads probe, length buckets, attention
    # statistics, source attention, ...), before the claims.
    extra, extra_plots = measurement_sections(runs, table["row"].tolist(), uri, out_dir, study)
    csv = atomic_write(out_dir / f"{study}.csv", table.round(4).to_csv(index=False))
    md = atomic_write(out_dir / f"{study}.md", render_markdown(study, results, table, paper, plots,
                                                               [*architecture_section(runs, table["row"].tolist()),
                                                                *extra,
                                                                *claims_section(study, runs, uri, results["parent"])],
                                                               row_diagnostics(runs, uri)))
    return [md, csv, *plots, *extra_plots]
