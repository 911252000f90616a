"""The per-layer gradient norms at initialization (harness/measure/grad_norms.py) as a report section: a table of
each row's first and last layers and their ratio, and Xiong et al.'s Figure 3 redrawn (norm against layer, one line
a row, encoder and decoder apart)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from harness.report.cells import bracket_cell, md_table
from harness.report.curves import plain_log_labels, plot_title, series_style
from harness.report.files import save_png
from harness.report.results import finished

_KEY = re.compile(r"^metrics\.gradnorm_(enc|dec)_(\d+)$")


def norms(runs: pd.DataFrame, row: str) -> dict[str, list[list[float]]]:
    """{"enc": per layer, the row's finished seeds' norms; "dec": the same}."""
    done = finished(runs, row)
    out: dict[str, list[list[float]]] = {}
    for side in ("enc", "dec"):
        layers = sorted(int(m[2]) for c in runs.columns if (m := _KEY.match(c)) and m[1] == side
                        and done[c].notna().any())
        out[side] = [done[f"metrics.gradnorm_{side}_{i}"].dropna().tolist() for i in layers]
    return out


def grad_norm_section(runs: pd.DataFrame, rows: list[str], path: Path, study: str = "") -> tuple[list[str], list[Path]]:
    by_row = {row: norms(runs, row) for row in rows}
    by_row = {row: n for row, n in by_row.items() if n["enc"] or n["dec"]}
    if not by_row:
        return [], []
    body = []
    for row, n in by_row.items():
        cells = [f"**{row}**"]
        for side in ("enc", "dec"):
            layers = n[side]
            if not layers:
                cells += ["–", "–", "–"]
                continue
            ratio = [last / first for first, last in zip(layers[0], layers[-1]) if first > 0]
            cells += [bracket_cell(layers[0], "{:.3g}"), bracket_cell(layers[-1], "{:.3g}"),
                      bracket_cell(ratio, "{:.2f}")]
        body.append(cells)
    lines = ["## Gradient norms at initialization", "",
             "Before the first update, one backward pass over the first dev pairs: the L2 norm of each layer's "
             "parameter gradients (Xiong et al. 2020, Figure 3, at this scale). Post-norm puts the largest gradients "
             "in the last layers, the reason it needs a warmup; pre-norm keeps them level with depth. Mean over seeds "
             "with its 95 % interval.", "",
             *md_table(["row", "encoder, first layer", "encoder, last layer", "last / first",
                        "decoder, first layer", "decoder, last layer", "last / first"], body), ""]
    plot = _plot(by_row, path, plot_title(study, runs) if study else "")
    return lines + [f"![{plot.stem}]({plot.name})", ""], [plot]


def _curves(by_row: dict) -> dict[str, dict[str, list[float]]]:
    """Each distinct curve once, labelled with every row that has it: rows that differ only in training (the depth
    study's warmup against none) start from the same weights, so their norms at initialization are the same and
    one line would hide the other."""
    groups: dict[tuple, tuple[list[str], dict[str, list[float]]]] = {}
    for row, n in by_row.items():
        means = {side: [sum(v) / len(v) for v in n[side]] for side in ("enc", "dec")}
        key = tuple(round(x, 9) for side in ("enc", "dec") for x in means[side])
        groups.setdefault(key, ([], means))[0].append(row)
    return {", ".join(rows): means for rows, means in groups.values()}


def _plot(by_row: dict, path: Path, title: str) -> Path:
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    axes = fig.subplots(1, 2)
    for i, (label, means) in enumerate(_curves(by_row).items()):
        for ax, side in zip(axes, ("enc", "dec")):
            if means[side]:
                ax.plot(range(1, len(means[side]) + 1), means[side], ms=3, label=label, **series_style(i))
    for ax, name in zip(axes, ("encoder", "decoder")):
        ax.set(yscale="log", xlabel=f"{name} layer (1 = nearest the input)", ylabel="gradient norm at init",
               title=name)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        plain_log_labels(ax.yaxis)
    fig.suptitle(f"{title + ': ' if title else ''}gradient norm by layer at initialization, mean over seeds")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7)
    return save_png(fig, path)
