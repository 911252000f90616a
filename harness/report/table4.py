"""Table 4 in the paper's layout: parsing F1 (unconstrained and tree-constrained decoding) beside the
paper's rows (MLflow -> reports/<study>.md, .csv, PNGs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.paper import columns, load_tables
from harness.report.cells import failure_cell, half_width, md_table, num, pm, seeds_cell
from harness.report.claims_section import claims_section
from harness.report.curves import plot_learning_curves, plot_title
from harness.report.files import save_png, write_files
from harness.report.header import header_lines
from harness.report.results import (
    NAN,
    column,
    declared_rows,
    mean_of,
    param_of,
    row_groups,
    row_order,
    std_of,
    synthetic_data,
    text_of,
)
from harness.report.stopping import stopping_notes

T4_SETUP = {"train_trees": "data.train_pairs", **columns("N", "d_model"), "beam": "train.beam_size",
            "alpha": "train.alpha", "max_extra": "train.max_extra"}
T4_SCORES = ("f1", "recall", "precision", "complete_match", "average_crossing", "well_formed", "parsed_sentences")


def _table4_ours() -> dict[str, str]:
    """Our row -> the paper's row whose `ours` names it (tables.yaml)."""
    return {spec["ours"]: name for name, spec in load_tables()["table4"]["rows"].items() if spec.get("ours")}


def summarize_table4(runs: pd.DataFrame, declared: list[str]) -> pd.DataFrame:
    """One line per row: setup as run, test and dev parse scores (mean over FINISHED seeds; F1 with its std and
    the half-width of its 95 % t-interval),
    PPL, size and time, with the paper's F1 for the Transformer row that names it."""
    rows, ours = load_tables()["table4"]["rows"], _table4_ours()
    records = []
    for row, g, done, status, reason in row_groups(runs, row_order(runs, list(ours), declared)):
        src = (done if len(done) else g).iloc[0]
        name = ours.get(row, "")
        rec = {"row": row, "paper_parser": name, "paper_f1": float(rows[name]["f1"]) if name else NAN,
               "status": status, "n_seeds": len(g), "n_finished": len(done), "data": text_of(src, "params.data.name"),
               **{c: param_of(src, k) for c, k in T4_SETUP.items()}}
        pairs = mean_of(done, "train_examples")            # the pairs read (a data directory ignores train_pairs)
        if pd.notna(pairs):
            trees = mean_of(done, "train_trees")              # whole trees among them (logged since parse_subtrees)
            rec["train_trees"] = trees if pd.notna(trees) else pairs
            rec["train_phrases"] = pairs - rec["train_trees"]
        for split in ("test", "dev"):
            rec.update({f"{split}_{s}": mean_of(done, f"{split}_{s}") for s in T4_SCORES})
            rec[f"{split}_f1_std"] = std_of(done, f"{split}_f1")
            rec[f"{split}_f1_ci"] = half_width(column(done, f"metrics.{split}_f1").dropna())
        rec.update({m: mean_of(done, m) for m in ("dev_ppl", "test_ppl", "steps", "train_seconds",
                                                "test_f1_constrained", "test_well_formed_constrained",
                                                "dev_f1_constrained")})
        rec["params_M"] = mean_of(done, "params") / 1e6
        rec["train_minutes"] = rec["train_seconds"] / 60
        rec["failure_reason"] = reason
        records.append(rec)
    return pd.DataFrame.from_records(records)


def render_table4(study: str, results: dict, table: pd.DataFrame) -> list[str]:
    t4 = load_tables()["table4"]
    lines = header_lines(study, results, t4["caption"])
    setup = ", ".join(f"{k} {v}" for k, v in t4.get("setup", {}).items())
    lines += ["The paper's values come from harness/paper/tables.yaml (Vaswani et al. 2017, arXiv:1706.03762 v7): "
              f"{t4.get('metrics', {}).get('f1', 'F1')}. The paper's setup (§6.3): {setup}.", "",
              "Our outputs are repaired into trees over their sentences and scored as EVALB does (COLLINS.prm); "
              "`well-formed` is the share of raw outputs that were already trees before the repair. Means over the "
              "seeds that FINISHED (F1: ± the half-width of its 95 % Student-t interval; the CSV also has the sample "
              "std); `seeds` = finished / run.", ""]
    if synthetic_data(results["runs"]):
        lines += ["This invocation parsed the made-up grammar's trees (`data.name=synth`), not the Penn Treebank, "
                  "with shrunken models: our F1 is not comparable with the paper's WSJ section 23 F1; only the "
                  "comparison between our rows (more training trees against fewer) is.", ""]
    else:
        paper_trees = t4.get("setup", {}).get("wsj_train_sentences")
        for r in table.to_dict("records"):
            wsj_only = t4["rows"].get(r["paper_parser"], {}).get("training", "").startswith("WSJ only")
            if pd.notna(r["train_trees"]) and paper_trees and r["data"] and wsj_only:
                phrases = r.get("train_phrases")
                also = (f" (and on {phrases:.0f} phrases of them as pairs of their own, `data.parse_subtrees`)"
                        if pd.notna(phrases) and phrases > 0 else "")
                lines += [f"`{r['row']}` trained on {r['train_trees']:.0f} trees of `{r['data']}`{also}, "
                          f"{r['train_trees'] / paper_trees:.0%} of the paper's WSJ-only set (sections 02-21, "
                          f"about {paper_trees:,} trees), with a model far smaller than the paper's; its test split "
                          "is the data directory's test.tree, which is section 23 only where the full WSJ was "
                          "prepared. The paper's rows beside it are on section 23.", ""]
    by = {r["row"]: r for r in table.to_dict("records")}
    body = []
    for name, spec in t4["rows"].items():
        mine = spec.get("ours")
        r = by.get(mine) if mine else None
        cell = "" if not mine else f"– (`{mine}` not run)" if r is None else \
            f"{pm(r['test_f1'], r['test_f1_ci'])} (`{mine}`)" if r["n_finished"] else f"{failure_cell(r)} (`{mine}`)"
        body.append([name, spec.get("training", "–"), num(spec.get("f1"), "{:.1f}"), cell])
    lines += ["## Table 4 as published, ours beside", ""]
    lines += md_table(["Parser", "Training", "WSJ 23 F1", "ours: F1 (test)"], body)
    lines += ["", "`constrained` (not the paper's; `train.constrained`): the same sentences decoded again with only "
              "the tokens allowed that keep the output a tree over exactly the sentence's words "
              "(harness/eval/parse.py TreeConstraint); its outputs are trees by construction."]
    head = ["row", "data", "training trees", "N", "d_model", "beam", "alpha", "seeds", "F1 test", "F1 dev",
            "recall", "precision", "complete match %", "avg crossing", "well-formed %", "F1 test, constrained",
            "F1 dev, constrained", "test PPL", "params (M)", "steps", "training (min)", "paper F1", "notes"]
    stops = stopping_notes(results["runs"])
    body = [[f"**{r['row']}**", r["data"] or "–", num(r["train_trees"], "{:.0f}"), num(r["N"], "{:g}"),
             num(r["d_model"], "{:g}"), num(r["beam"], "{:g}"), num(r["alpha"], "{:g}"), seeds_cell(r),
             pm(r["test_f1"], r["test_f1_ci"]), pm(r["dev_f1"], r["dev_f1_ci"]), num(r["test_recall"]),
             num(r["test_precision"]), num(r["test_complete_match"]), num(r["test_average_crossing"]),
             num(r["test_well_formed"], "{:.1f}"), num(r.get("test_f1_constrained")),
             num(r.get("dev_f1_constrained")), num(r["test_ppl"]), num(r["params_M"], "{:.3g}"),
             num(r["steps"], "{:.0f}"), num(r["train_minutes"], "{:.1f}"), num(r["paper_f1"], "{:.1f}"),
             "; ".join(x for x in (failure_cell(r), stops.get(r["row"])) if x)] for r in table.to_dict("records")]
    lines += ["", "## Ours in detail (test split unless marked dev)", "", *md_table(head, body)]
    return lines


def plot_table4_f1(study: str, table: pd.DataFrame, path: Path, title: str | None = None) -> Path:
    """Test and dev F1 per row (ours, points with their intervals), with the paper's WSJ 23 F1 marked on the rows
    that map to it. Points on an axis fitted to the values, not bars from 0: F1s of 91 to 99 on a 0-100 bar chart
    hid the paper's mark inside the bars and the gaps between them."""
    fig = Figure(figsize=(max(5, 1.5 * len(table) + 2), 4.5), layout="constrained")
    ax = fig.add_subplot()
    x = list(range(len(table)))
    for shift, split, color, marker in ((-0.12, "test", "C0", "o"), (0.12, "dev", "C2", "s")):
        ax.errorbar([i + shift for i in x], table[f"{split}_f1"], yerr=table[f"{split}_f1_ci"].fillna(0), fmt=marker,
                    color=color, capsize=4, ms=7, label=f"ours, {split} F1")
    paper = table["paper_f1"]
    if paper.notna().any():
        ax.plot([i for i, v in zip(x, paper) if pd.notna(v)], paper.dropna(), "k_", ms=40, mew=2,
                label="paper, WSJ 23 F1")
    ax.set_xticks(x, [r["row"] + ("" if r["status"] == "FINISHED" else f"\n{r['status']}")
                      for r in table.to_dict("records")])
    ax.set_xlim(-0.6, len(table) - 0.4)
    low, high = ax.get_ylim()
    ax.set_ylim(max(0.0, low - 1), min(100.0, high + 1) if high < 100 else high)
    ax.grid(axis="y", alpha=0.3)
    ax.set(ylabel="bracketing F1", title=f"{title or study}: parsing F1 per row (± 95 % interval over seeds)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), markerscale=0.6)   # outside the data
    return save_png(fig, path)


def write_table4(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    runs = results["runs"]
    table = summarize_table4(runs, declared_rows(results["parent"]))
    plots = [plot_table4_f1(study, table, out_dir / f"{study}_f1.png", plot_title(study, runs)),
             plot_learning_curves(study, runs, table["row"].tolist(), uri, out_dir / f"{study}_learning_curves.png")]
    lines = render_table4(study, results, table)
    return write_files(study, out_dir, lines, table, plots, claims_section(study, runs, uri, results["parent"]))


# The paper table (the parent's `table` tag) -> its writer: (study, results, uri, out_dir) -> [md, csv, *pngs].
