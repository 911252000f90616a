"""The layout of a study with no paper table of its own (studies/modern.yaml, decoder_only.yaml, heads.yaml,
scaling_dk.yaml, extrapolation.yaml, a named variant): one line per row with what it changes against the base, dev
PPL and both BLEUs as mean ± 95 % half-width over seeds, seed-paired deltas against the base, then each row's
architecture, the sections of the measurements the rows took, and the claims. Table 3's layout (table3.py) builds
on the same per-row summary (`summarize_rows`) and adds the paper's columns and knob groups."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pandas as pd
from matplotlib.figure import Figure

from harness.report.cells import half_width, md_table, num, pm, signed_pm
from harness.report.claims_section import claims_section
from harness.report.curves import plain_log_labels, plot_learning_curves, plot_title
from harness.report.files import save_png, write_files
from harness.report.header import header_lines, is_measurement_setting
from harness.report.labels import place_labels
from harness.report.results import METRICS, column, declared_rows, finished, row_groups, row_order, synthetic_data
from harness.report.sections import architecture_section, measurement_sections
from harness.report.stats import interval
from harness.report.stopping import all_diverged, diverged_seeds, regime_note, row_diagnostics

# Params that differ between seeds, never between rows: not a row's "change" against the base.
_PER_SEED = {"train.seed", "data.seed"}


def summarize_rows(runs: pd.DataFrame, order: Iterable[str], shown_columns: dict[str, str] | None = None,
                   reference: Callable[[str, set], str] = lambda row, present: "base") -> pd.DataFrame:
    """One line per row of `order`: its status and seeds, the `shown_columns` ({column: param}) as run, mean, std
    (ddof=1) and 95 % half-width over FINISHED seeds of each of METRICS, params, the failure, the settings it
    changes against the base beyond the shown columns, and seed-paired deltas against reference(row, present)."""
    shown_columns = shown_columns or {}
    runs = runs.assign(row=runs["tags.row"].astype(str))
    records = []
    for row, g, done, status, reason in row_groups(runs, list(order)):
        first = (done if len(done) else g).iloc[0]   # params are the same for every seed of a row
        rec = {"row": row, "status": status, "n_seeds": len(g), "n_finished": len(done)}
        rec.update({col: pd.to_numeric(first.get(f"params.{key}", "nan"), errors="coerce")
                    for col, key in shown_columns.items()})
        for name, key in METRICS.items():
            values = column(done, f"metrics.{key}").dropna()
            rec[f"{name}_mean"], rec[f"{name}_std"] = values.mean(), values.std()  # NaN std for one seed
            rec[f"{name}_ci"] = half_width(values)
        rec["params_M"] = column(done, "metrics.params").mean() / 1e6
        rec["failure_reason"] = reason
        rec["_params"] = {k[len("params."):]: v for k, v in first.items() if k.startswith("params.") and pd.notna(v)}
        records.append(rec)
    table = pd.DataFrame.from_records(records)
    table["changes"] = changes(table, shown_columns)
    table = table.drop(columns="_params")
    present = set(table["row"])
    for name, key in METRICS.items():   # deltas against base, seed by seed: the comparison that survives the scale
        table[f"delta_{name}"], table[f"delta_{name}_ci"] = zip(*(paired_delta(runs, row, key, reference(row, present))
                                                                  for row in table["row"]))
    return table


def notes_last(table: pd.DataFrame) -> pd.DataFrame:
    """The free-text columns after the numbers."""
    notes = ["changes", "failure_reason"]
    return table[[c for c in table.columns if c not in notes] + notes]


def paired_delta(runs: pd.DataFrame, row: str, key: str, ref: str = "base") -> tuple[float, float]:
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
    mean, low, _, _ = interval(a[s] - b[s] for s in sorted(set(a) & set(b)))
    return mean, mean - low


def settings_reference(table: pd.DataFrame) -> str:
    """The row every other row's settings are told against: the base, or in a study without one (depth.yaml) its
    first row."""
    return "base" if (table["row"] == "base").any() else str(table["row"].iloc[0])


def changes(table: pd.DataFrame, shown_columns: dict[str, str]) -> list[str]:
    """Model/train/data params a row changes against the base beyond the printed columns (e.g. row E's
    positional=learned, modern rows' norm or ffn, the D rows' smaller training set in the tiny profile), so
    rows that print alike can be told apart."""
    if table.empty:
        return []
    base = table.loc[table["row"] == settings_reference(table), "_params"]
    base, shown = base.iloc[0], set(shown_columns.values()) | _PER_SEED

    def implied(k: str, params: dict) -> bool:
        # Fields derived from printed ones: n_kv_heads follows n_heads, per-side depths follow n_layers.
        derived_from = {"model.n_kv_heads": "model.n_heads", "model.n_enc_layers": "model.n_layers",
                        "model.n_dec_layers": "model.n_layers"}
        return k in derived_from and params.get(k) == params.get(derived_from[k])
    # a measurement's settings say what a row measures, not what it trains: no change
    return [", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(params.items())
                      if k.startswith(("model.", "train.", "data.")) and k not in shown and base.get(k) != v
                      and not implied(k, params) and not is_measurement_setting(k))
            for params in table["_params"]]


def plot_bleu_vs_params(study: str, table: pd.DataFrame, path: Path, title: str | None = None) -> Path | None:
    """Dev BLEU against parameters, one point a row, each named beside it or, where rows crowd, in a column joined
    to it by a line (place_labels); None (not drawn) where the rows' sizes hardly differ (within 5 %, e.g. only a
    position embedding apart) or fewer than two rows finished: such a plot would say nothing."""
    ok = table.dropna(subset=["params_M", "bleu_mean"])
    if len(ok) < 2 or ok["params_M"].max() <= 1.05 * ok["params_M"].min():
        return None
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.add_subplot()
    ax.errorbar(ok["params_M"], ok["bleu_mean"], yerr=ok["bleu_std"].fillna(0), fmt="o", capsize=3)
    # Many rows share the base's size (Table 3's A, D and E rows): each name goes beside its point where it fits,
    # else in a column right of its crowd, joined to its point by a line (place_labels). Room on the right first,
    # so that a name beside the rightmost point fits inside the axes.
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi + 0.12 * (hi - lo))
    ax.set(xlabel="parameters (M)", ylabel="dev BLEU (sacreBLEU)",
           title=f"{title or study}: dev BLEU against size (ours)")
    place_labels(ax, [str(r) for r in ok["row"]], list(ok["params_M"]), list(ok["bleu_mean"]),
                 list(ok["bleu_std"].fillna(0)))
    return save_png(fig, path)


def plot_rows(study: str, table: pd.DataFrame, path: Path, title: str | None = None,
              diverged: set[str] = frozenset()) -> Path | None:
    """Bars per row, dev BLEU tok above and dev PPL below, each with its seeds' spread; None (not drawn) for a
    single row, which the table says as well. Rows in `diverged` (every seed stopped as diverged, scored as its
    start) are hatched and say so."""
    if len(table) < 2:
        return None
    return save_png(rows_figure(study, table, title, diverged), path)


def rows_figure(study: str, table: pd.DataFrame, title: str | None = None,
                diverged: set[str] = frozenset()) -> Figure:
    width = max(5, 0.7 * len(table))
    fig = Figure(figsize=(width, 5))
    axes = fig.subplots(2, 1, sharex=True)
    for ax, (name, label) in zip(axes, (("bleu_tok", "dev BLEU tok"), ("ppl", "dev PPL"))):
        bars = ax.bar(table["row"], table[f"{name}_mean"].fillna(0), yerr=table[f"{name}_std"].fillna(0), capsize=3)
        for bar, row in zip(bars, table["row"]):
            if row in diverged:
                bar.set(hatch="//", facecolor="white", edgecolor="C3")
        ax.set_ylabel(label)
    for i, row in enumerate(table["row"]):
        if row in diverged:
            axes[0].annotate("diverged", (i, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                             va="bottom", color="C3", fontsize=8)
    ppl = pd.to_numeric(table["ppl_mean"], errors="coerce").dropna()
    if len(ppl) and ppl.min() > 0 and ppl.max() / ppl.min() > 20:       # diverged rows beside trained ones
        axes[1].set_yscale("log")
        plain_log_labels(axes[1].yaxis)
        axes[1].set_ylabel("dev PPL (log scale)")
    # a name wider than its bar's slot (about 0.075 inch a character at this size) would run into the next
    if 0.075 * max(len(str(r)) for r in table["row"]) > 0.8 * width / len(table):
        for tick in axes[1].get_xticklabels():
            tick.set(rotation=30, ha="right")
    axes[0].set_title(f"{title or study}: dev BLEU and PPL per row (ours)")
    return fig


def row_lines(table: pd.DataFrame, diag: dict) -> list[str]:
    """The rows table: seeds, dev PPL and both BLEUs over seeds, params, deltas against the base, notes."""
    head = ["row", "seeds", "dev PPL", "BLEU sacre", "BLEU tok", "params (M)", "Δ PPL", "Δ BLEU tok",
            f"changes against {settings_reference(table) if len(table) else 'base'}; notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.to_dict("records"):
        seeds, figures, notes = row_cells(r, diag)
        lines.append("| " + " | ".join([f"**{r['row']}**", seeds, *figures, notes]) + " |")
    return lines


def row_cells(r: dict, diag: dict) -> tuple[str, list[str], str]:
    """One summarized row's cells (Table 3's layout shares them): its seeds (finished / run, and the status where
    not all finished), its figures (dev PPL, both BLEUs, params, the deltas against its reference) and its notes
    (what it changes, why it failed, its regime), escaped for a Markdown table."""
    seeds = f"{r['n_finished']}/{r['n_seeds']}" + ("" if r["status"] == "FINISHED" else f" {r['status']}")
    failure = f"{r['status']}: {r['failure_reason']}" if r["failure_reason"] else ""
    notes = "; ".join(x for x in (r["changes"], failure, regime_note(r["row"], diag)) if x)
    figures = [pm(r["ppl_mean"], r["ppl_ci"]), pm(r["bleu_mean"], r["bleu_ci"]),
               pm(r["bleu_tok_mean"], r["bleu_tok_ci"]), num(r["params_M"], "{:.3g}"),
               signed_pm(r["delta_ppl"], r["delta_ppl_ci"]),
               signed_pm(r["delta_bleu_tok"], r["delta_bleu_tok_ci"])]
    return seeds, figures, notes.replace("|", "\\|").replace("\n", " ")


def diverged_rows(runs: pd.DataFrame, rows: list[str]) -> set[str]:
    """The rows every finished seed of which stopped as diverged (train.stop_diverged)."""
    return {row for row in rows if all_diverged(diverged_seeds(finished(runs, row)))}


def divergence_section(runs: pd.DataFrame, rows: list[str]) -> list[str]:
    """Where runs trained with train.stop_diverged: per row, how many seeds diverged and at which steps, and the dev
    PPL they are scored by (their start) beside their weights' own."""
    if "metrics.diverged" not in runs:
        return []
    body = []
    for row in rows:
        g = finished(runs, row)
        flags = pd.to_numeric(g["metrics.diverged"], errors="coerce").dropna()
        if flags.empty:
            continue
        gone = g[pd.to_numeric(g["metrics.diverged"], errors="coerce") == 1]
        # MLflow has no column for a metric no run logged: diverged_step is absent when no run diverged
        where = pd.to_numeric(gone.get("metrics.diverged_step", pd.Series(float("nan"), index=gone.index)),
                              errors="coerce")
        steps = ", ".join(f"seed {s}: step {int(x)}" for s, x in zip(gone["tags.seed"], where) if pd.notna(x))
        body.append([f"**{row}**", f"{len(gone)} of {len(flags)}", steps or "–",
                     num(pd.to_numeric(g.get("metrics.dev_ppl_start"), errors="coerce").mean(), "{:.1f}"),
                     num(pd.to_numeric(gone.get("metrics.dev_ppl_measured"), errors="coerce").mean(), "{:.3g}")
                     if len(gone) else "–"])
    if not body:
        return []
    return ["## Divergence", "",
            "Each run evaluated dev before its first update and stopped where it diverged (`train.stop_diverged`): at "
            "a non-finite loss, or at a dev evaluation above that start. A diverged run is scored as its start (the "
            "rows table and the claims read its initial dev PPL); its weights' own dev PPL when it stopped is beside.",
            "", *md_table(["row", "diverged", "where", "dev PPL at the start", "dev PPL of the diverged weights"],
                          body), ""]


# What each study of this layout asks, for its report's title (a study without one is titled by its name alone).
STUDY_TITLES = {
    "modern": "today's replacements (RoPE, pre-norm, RMSNorm, SwiGLU, GQA, sliding windows) against the paper's base",
    "decoder_only": "the encoder-decoder against decoder-only shapes at equal parameters",
    "depth": "post-norm against pre-norm as stacks deepen, with and without warmup",
    "scaling_dk": "why the dot products are scaled (§3.2.1)",
    "extrapolation": "position encodings past the training lengths (§3.5)",
    "heads": "what the attention heads do (Figures 3-5)",
}


def write_rows(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    """The rows layout: header, the rows table, its plots, each row's architecture, the measurements' sections,
    the claims."""
    parent, runs = results["parent"], results["runs"]
    table = notes_last(summarize_rows(runs, row_order(runs, (), declared_rows(parent))))
    rows = table["row"].tolist()
    title = plot_title(study, runs)
    plots = [p for p in (plot_learning_curves(study, runs, rows, uri, out_dir / f"{study}_learning_curves.png"),
                         plot_bleu_vs_params(study, table, out_dir / f"{study}_bleu_vs_params.png", title),
                         plot_rows(study, table, out_dir / f"{study}_rows.png", title, diverged_rows(runs, rows)))
             if p is not None]
    lines = header_lines(study, results, STUDY_TITLES.get(study), paper_caption=False)
    if parent["tags"].get("profile") == "tiny" or synthetic_data(runs):
        lines += ["This invocation used the made-up corpus (`data.name=synth`) and shrunken models: absolute PPL and "
                  "BLEU say nothing about WMT14; the direction and size of each row's difference from the base do "
                  "(the Δ columns).", ""]
    averaged = sorted({int(v) for v in column(runs, "params.train.average_last").dropna() if v > 0})
    if averaged:
        lines += [f"Each row is scored on the mean of its last {' or '.join(map(str, averaged))} checkpoints "
                  "(`train.average_last`).", ""]
    ref = settings_reference(table) if len(table) else "base"
    lines += ["Means ± the half-width of their 95 % Student-t interval over the seeds that FINISHED (no interval "
              "from one seed); `seeds` = finished / run. Δ columns are paired by seed: the mean of (row - base) over "
              "the seeds both finished, ± its own 95 % half-width. The last column names every setting a row "
              f"changes against {'the base' if ref == 'base' else ref + ', the first row (the study has no base)'}, "
              "read from each trial's params.", ""]
    lines += row_lines(table, row_diagnostics(runs, uri))
    extra, extra_plots = measurement_sections(runs, rows, uri, out_dir, study)
    tail = [*divergence_section(runs, rows), *architecture_section(runs, rows), *extra,
            *claims_section(study, runs, uri, parent)]
    return write_files(study, out_dir, lines, table, plots, tail) + extra_plots
