"""Learning curves and the axis helpers the plots share: a plot's title, log-axis tick labels, one style per
series, and the dev curves of a study's rows in panels of a few rows each.

Plots use matplotlib's object-oriented API, not pyplot: no global backend switch and no figure registry to leak; a
bare Figure renders with the Agg canvas."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FuncFormatter,
    LogFormatter,
    LogFormatterSciNotation,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
    ScalarFormatter,
)

from harness import logged
from harness.report.files import save_png


def plot_title(study: str, runs: pd.DataFrame) -> str:
    """A plot's title stem: the study, the invocation's name where it has one (`run --name`), and the profile its
    trials ran in: "table3 corpus2 (tiny profile)"."""
    profiles = sorted(set(runs["tags.profile"].dropna().astype(str))) if "tags.profile" in runs else []
    names = sorted(set(runs[f"tags.{logged.VARIANT_TAG}"].dropna().astype(str))) \
        if f"tags.{logged.VARIANT_TAG}" in runs else []
    named = " ".join([study, *names])
    return f"{named} ({', '.join(profiles)} profile)" if profiles else named


# More series than colours: each block of ten rows gets its own line style and marker as well.
_STYLES, _MARKERS = ["-", "-.", ":", (0, (5, 1))], ["o", "s", "^", "D"]


class _PlainLogFormatter(LogFormatter):
    """LogFormatter's choice of which ticks to label, each written as a plain number (0.002, 0.3, 1.4, 60) where
    LogFormatter writes 3e-01 below 1."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain_log_labels(axis) -> None:
    """A log axis labelled in plain numbers (0.3, 1.2, 1.4, 2, 3, 10, 60), its minor ticks too where the range is
    short (under about two decades): not 1.4 x 10^0 or 3e-01, and not a single labelled tick over a narrow range.
    Call it after plotting: under a decade (a dev PPL from 1.4 to 3.1, where a log axis's own ticks are 2 and 3
    alone) the ticks are a linear axis's round numbers (1.5, 2, 2.5, 3), placed on the log scale."""
    axis.axes.autoscale_view()
    low, high = sorted(axis.get_view_interval())
    if 0 < low and high < 10 * low:
        axis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        axis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        axis.set_minor_locator(NullLocator())
        return
    axis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def sci_log_labels(axis) -> None:
    """A log axis of large counts (training FLOPs) labelled in scientific notation at enough ticks to read a value:
    at 1, 2 and 5 of each decade where it spans one to three decades (FLOPs from 2e13 to 7e14 otherwise carry the
    one label 10^14); the decades alone past three. Under one decade the ticks are a linear axis's round numbers
    on the log scale, each labelled by its mantissa (0.6, 0.8, 1.0, 1.2, 1.4) with the common power of ten (x10^15)
    written once at the axis's end: a log axis's own ticks there (6, 7, 8, 9 x 10^14) crowd toward its top until
    their labels touch. Call it after plotting."""
    axis.axes.autoscale_view()
    low, high = sorted(axis.get_view_interval())
    if low <= 0 or high > 1000 * low:
        return
    if high < 10 * low:
        axis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        short = ScalarFormatter(useMathText=True)
        short.set_powerlimits((0, 0))                    # always the mantissa alone, the power at the end
        axis.set_major_formatter(short)
        axis.set_minor_locator(NullLocator())
        return
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(math.inf, math.inf)))
    axis.set_minor_formatter(NullFormatter())


def series_style(i: int) -> dict:
    """The colour, line style and marker of a plot's i-th series: ten colours, and past them a new line style and
    marker for each block of ten, so that no two of up to forty series look alike."""
    block = i // 10
    return {"color": f"C{i % 10}", "ls": _STYLES[block % len(_STYLES)], "marker": _MARKERS[block % len(_MARKERS)]}


def diverged_curve(hist: list[tuple[int, float]], start: float) -> list[tuple[int, float]]:
    """A diverged run's dev PPL as its weights went: the score logged at its last step, which is its start
    (harness/train/finish.py), is not a point of the curve."""
    last = max(s for s, _ in hist)
    return [(s, v) for s, v in hist if not (s == last and s > 0 and math.isclose(v, float(start)))]


# Up to this many rows share one pair of panels; past it, a study's rows are drawn in groups (`curve_panels`).
_ONE_PANEL_ROWS = 10
_GROUP_ROWS = 7


def curve_panels(order: list[str], most: int = _GROUP_ROWS) -> list[list[str]]:
    """The rows of a learning-curve figure in panels of at most `most` rows, the base ("base", or the first row)
    left out (it is drawn in every panel): rows named as the paper's Table 3 names them (a capital letter and a
    number, or the letter and `base`: A1, C4, Dbase) by their letter, other names with a number by it (the depth
    study's post12, pre12_nowarmup), the rest (and a key's only row) together in study order; a group larger than
    `most` is cut into even pieces in study order."""
    ref = "base" if "base" in order else order[0]
    by, rest = {}, []
    for row in order:
        if row == ref:
            continue
        m = re.fullmatch(r"([A-Z])(\d+|base)", row)
        n = re.search(r"\d+", row)
        key = m[1] if m else f"#{n[0]}" if n else None
        (by.setdefault(key, []) if key else rest).append(row)
    alone = {g[0] for g in by.values() if len(g) == 1}            # a key of one row joins the rest (P0)
    rest = [row for row in order if row in alone or row in rest]
    groups = [g for g in (*(g for g in by.values() if len(g) > 1), rest) if g]
    cut = [math.ceil(len(g) / math.ceil(len(g) / most)) for g in groups]      # even pieces: 8 rows as 4 + 4
    return [g[i:i + n] for g, n in zip(groups, cut) for i in range(0, len(g), n)]


def _curves(uri: str, run: pd.Series) -> dict[str, list[tuple[int, float]]]:
    """A run's training loss and dev PPL as (step, value) in step order; a diverged run's dev PPL without the
    start it was scored as."""
    out = {}
    for key in ("train_loss", "dev_ppl"):
        hist = sorted(logged.metric_history(uri, run["run_id"], key))
        if hist and key == "dev_ppl" and run.get("metrics.diverged") == 1:
            hist = diverged_curve(hist, run.get("metrics.dev_ppl_start"))
        out[key] = hist
    return out


def _draw_row(axes, seeds: list[tuple[pd.Series, dict]], label: str, style: dict) -> None:
    """One row's seeds on a (train loss, dev PPL) pair of axes: one line a seed, unfinished seeds dashed (they
    are not in the table's means), an x where a run stopped as diverged; the legend names the row once."""
    for i, (run, curves) in enumerate(seeds):
        ok, gone = run["status"] == "FINISHED", run.get("metrics.diverged") == 1
        for ax, key in zip(axes, ("train_loss", "dev_ppl")):
            if not curves[key]:
                continue
            steps, values = zip(*curves[key])
            ax.plot(steps, values, color=style["color"], ls=style["ls"] if ok else "--", lw=style.get("lw", 1),
                    marker=style["marker"] if key == "dev_ppl" else None,
                    markevery=max(1, len(steps) // 8), ms=3, label=label if i == 0 and key == "dev_ppl" else None)
            if gone and key == "dev_ppl":
                ax.plot(steps[-1:], values[-1:], color=style["color"], marker="x", ms=7, ls="none")


def plot_learning_curves(study: str, runs: pd.DataFrame, order: list[str], uri: str, path: Path) -> Path:
    """Training loss (left) and dev PPL every eval_every steps (right, log scale), one line per seed: whether each
    row converged is read off the right panel. Up to ten rows share one pair of panels, one colour per row; more
    (Table 3's 22) are drawn a pair of panels per group of rows (`curve_panels`: A, B, C, D, the rest), each with
    the base in black for reference and its own legend outside the panels, every panel on the same y axis."""
    def seeds_of(row: str) -> list[tuple[pd.Series, dict]]:
        rows = runs[runs["tags.row"].astype(str) == row]
        rows = rows.sort_values("status", key=lambda st: st != "FINISHED", kind="stable")   # legend: solid
        return [(run, _curves(uri, run)) for _, run in rows.iterrows()]
    groups = [order] if len(order) <= _ONE_PANEL_ROWS else curve_panels(order)
    ref = None if len(groups) == 1 else ("base" if "base" in order else order[0])
    fig = Figure(figsize=(12.5, 4.8 if len(groups) == 1 else 3.1 * len(groups) + 0.6), layout="constrained")
    grid = fig.subplots(len(groups), 2, sharey="col", squeeze=False)      # each group its own steps (big: 3x)
    title = plot_title(study, runs)
    base = seeds_of(ref) if ref is not None else []          # read once, drawn in every group
    for axes, group in zip(grid, groups):
        if ref is not None:
            _draw_row(axes, base, ref, {"color": "black", "ls": "-", "marker": "o", "lw": 1.6})
        for j, row in enumerate(group):
            _draw_row(axes, seeds_of(row), row, series_style(j))
        if ref is not None:
            axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
            axes[0].set_title(f"{', '.join(group)}: training loss", fontsize=9)
            axes[1].set_title(f"{', '.join(group)}: dev perplexity", fontsize=9)
        axes[0].set_ylabel("train loss (label-smoothed)")
        axes[1].set(ylabel="dev PPL (log scale)", yscale="log")
    for ax in grid.flat:
        ax.set_xlabel("training step")
    if ref is None:
        grid[0][0].set_title(f"{title}: training loss")
        grid[0][1].set_title(f"{title}: dev perplexity during training")
        handles, labels = grid[0][1].get_legend_handles_labels()
        if handles:      # one legend for both panels, outside them
            fig.legend(handles, labels, loc="outside right upper", fontsize=7, ncol=1 + len(labels) // 24)
    else:
        fig.suptitle(f"{title}: learning curves by group of rows, the base ({ref}) in black in each")
    plain_log_labels(grid[0][1].yaxis)
    return save_png(fig, path)
