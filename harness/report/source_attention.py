"""How much each target position reads the source, by position (harness/eval/source_attention.py's src_*
metrics): the decoder-only rows' attention mass on the source, and every row's source share of what its attention
sub-layers add, beside the encoder-decoder's. A table, the fade between early and late positions with its
seed-paired interval, and a plot. Plain pandas and matplotlib: reads MLflow's runs only."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from harness.report.cells import bracket_cell, md_table
from harness.report.curves import plot_title
from harness.report.files import save_png
from harness.report.results import finished
from harness.report.shares import EARLY, LATE, fade_per_run, positions
from harness.report.stats import interval

_LAYER_METRIC = re.compile(r"^metrics\.src_(mass|contrib)_L(\d+)_p(\d+)$")
def _fade(done: pd.DataFrame, kind: str, pos: list[int], minus: str | None = None) -> str:
    """The fade's mean over seeds and its 95 % interval; minus: another kind's fade taken away, seed by seed."""
    per_seed = fade_per_run(done, kind, pos)
    if per_seed is None:
        return "–"
    if minus is not None:
        other = fade_per_run(done, minus, pos)
        if other is None:
            return "–"
        per_seed = per_seed - other
    return bracket_cell(per_seed.dropna(), "{:+.1f}", 100)


def source_attention_section(runs: pd.DataFrame, order: list[str], path: Path) -> tuple[list[str], list[Path]]:
    """The section's lines (its plots' image links among them) and its plots (path, and beside it
    `*_by_layer.png` where the runs measured each layer), or ([], []) where no run measured it."""
    kinds = [k for k in ("mass", "contrib") if positions(runs, k)]      # `uniform` goes into mass's table
    if not kinds:
        return [], []
    lines = ["## How much each target position reads the source", "",
             "Fu et al. (2023) found a decoder-only translation model's attention to the source fading as the target "
             "grows (\"attention degeneration\"); an encoder-decoder reads the source through its cross-attention "
             "at every position. Measured after training on the first dev sentences (`train."
             "source_attention_sentences`, harness/eval/source_attention.py), by target position (1 = the first "
             "target token), the mean over layers, heads and the real tokens at that position, in %: `mass` is the "
             "decoder-only rows' attention probability on source tokens; `contribution` is, for every row, the "
             "source's share of what its attention sub-layers add, ||source part|| / (||source part|| + ||target "
             "part||) (the decoder-only attention output split by its keys; the encoder-decoder's cross- against "
             f"its self-attention). Means over seeds with their 95 % t-intervals; `fade` is the mean share over "
             f"positions 1-{EARLY} minus that over positions {LATE} on, per seed (> 0: the source fades). Part of a "
             "fade in `mass` is arithmetic: a target token at position t of a sentence with n source tokens sees n "
             "source and t target keys, so uniform attention would put n / (n + t) on the source; the `uniform "
             "attention` line gives that baseline on the same sentences, and `fade beyond uniform` what the model "
             "adds to it (> 0: it turns from the source faster than the keys' count does). Positions with fewer than "
             "20 target tokens are left out.", ""]
    uniform = bool(positions(runs, "uniform"))
    for kind in kinds:
        pos = positions(runs, kind)
        rows = [r for r in order if len(finished(runs, r))
                and finished(runs, r).get(f"metrics.src_{kind}_p1", pd.Series(dtype=float)).notna().any()]
        shown = [p for p in pos if p <= 12]
        beyond = kind == "mass" and uniform
        head = ["row", "seeds", *(f"{p}" for p in shown), f"fade (1-{EARLY} vs {LATE}+)",
                *(["fade beyond uniform"] if beyond else [])]
        body = []
        for row in rows:
            done = finished(runs, row)
            cells = [bracket_cell(done[f"metrics.src_{kind}_p{p}"].dropna(), scale=100)
                     if f"metrics.src_{kind}_p{p}" in done else "–" for p in shown]
            body.append([f"**{row}**", str(len(done)), *cells, _fade(done, kind, pos),
                         *([_fade(done, kind, pos, minus="uniform")] if beyond else [])])
        if beyond and rows:   # the baseline depends on the sentences only: the first row's runs give it
            done = finished(runs, rows[0])
            cells = [bracket_cell(done[f"metrics.src_uniform_p{p}"].dropna(), scale=100)
                     if f"metrics.src_uniform_p{p}" in done else "–" for p in shown]
            body.append(["uniform attention", str(len(done)), *cells, _fade(done, "uniform", pos), "0"])
        name = "attention mass on the source" if kind == "mass" else "source share of the attention's contribution"
        lines += [f"**{name}** (%), by target position:", ""] + md_table(head, body) + [""]
    plots = [plot_source_attention(runs, order, kinds, path)]
    lines += [f"![{plots[0].stem}]({plots[0].name})", ""]
    layer_lines, layer_plot = _by_layer(runs, order, path.with_name(f"{path.stem}_by_layer.png"))
    lines += layer_lines
    plots += [layer_plot] if layer_plot else []
    return lines, plots


def _layer_kind(runs: pd.DataFrame, row: str) -> tuple[str, list[int]] | None:
    """(the per-layer measure a row has: `mass` where it logged one, else `contrib`; its layers), or None."""
    done = finished(runs, row)
    for kind in ("mass", "contrib"):
        layers = sorted({int(m[2]) for c in runs.columns if (m := _LAYER_METRIC.match(c)) and m[1] == kind
                         and done[c].notna().any()})
        if layers:
            return kind, layers
    return None


def _by_layer(runs: pd.DataFrame, order: list[str], path: Path) -> tuple[list[str], Path | None]:
    """Per layer of each row: its share over positions 1..EARLY and over LATE.., and the fade between them with
    its seed interval (the decoder-only rows' attention mass, the encoder-decoder's contribution), a table and a
    plot of each layer's share by position."""
    measured = [(row, found) for row in order if (found := _layer_kind(runs, row))]
    if not measured:
        return [], None
    head = ["row", "measure", "layer", f"share 1-{EARLY}", f"share {LATE}+", f"fade (1-{EARLY} vs {LATE}+)"]
    body = []
    for row, (kind, layers) in measured:
        done = finished(runs, row)
        for layer in layers:
            name = f"{kind}_L{layer}"
            pos = positions(runs, name)
            early = [f"metrics.src_{name}_p{p}" for p in pos if p <= EARLY]
            late = [f"metrics.src_{name}_p{p}" for p in pos if p >= LATE]
            share = (lambda cols: bracket_cell(done[cols].mean(axis=1).dropna(), scale=100) if cols else "–")
            body.append([f"**{row}**" if layer == layers[0] else "", "mass" if kind == "mass" else "contribution",
                         str(layer), share(early), share(late), _fade(done, name, pos)])
    lines = ["**By layer** (layer 1 reads the embeddings; the decoder-only rows' attention mass on the source, the "
             "encoder-decoder's source share of its decoder layers' attention contribution), in %, means over seeds "
             "with their 95 % t-intervals:", ""] + md_table(head, body) + [""]
    fig = Figure(figsize=(3.4 * len(measured), 3.4), layout="constrained")
    for i, (row, (kind, layers)) in enumerate(measured):
        ax = fig.add_subplot(1, len(measured), i + 1)
        done = finished(runs, row)
        for layer in layers:
            cols = [f"metrics.src_{kind}_L{layer}_p{p}" for p in positions(runs, f"{kind}_L{layer}")]
            cols = [c for c in cols if c in done and done[c].notna().any()]
            ax.plot([int(c.rsplit("_p", 1)[1]) for c in cols], [100 * done[c].mean() for c in cols], marker="o",
                    ms=2, label=f"layer {layer}")
        ax.set(xlabel="target position", ylabel="%" if i == 0 else None, ylim=(0, 100),
               title=f"{row}: {'mass' if kind == 'mass' else 'contribution'}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))        # positions are whole: no tick at 2.5
        ax.legend(fontsize=6)
    fig.suptitle(f"{_title(runs, path)}: the source's share by layer, means over seeds")
    plot = save_png(fig, path)
    return lines + [f"![{plot.stem}]({plot.name})", ""], plot


def plot_source_attention(runs: pd.DataFrame, order: list[str], kinds: list[str], path: Path) -> Path:
    fig = Figure(figsize=(5.2 * len(kinds), 4.2), layout="constrained")
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), i + 1)
        pos = positions(runs, kind)
        for row in order:
            done = finished(runs, row)
            cols = [f"metrics.src_{kind}_p{p}" for p in pos if f"metrics.src_{kind}_p{p}" in done]
            if not len(done) or not cols or done[cols[0]].isna().all():
                continue
            stats = [interval(done[c].dropna()) for c in cols]
            xs = [int(c.rsplit("_p", 1)[1]) for c in cols]
            means = [100 * s[0] for s in stats]
            lows = [100 * s[1] if not math.isnan(s[1]) else 100 * s[0] for s in stats]
            highs = [100 * s[2] if not math.isnan(s[2]) else 100 * s[0] for s in stats]
            color = f"C{order.index(row) % 10}"          # a row's colour is the same in both panels
            ax.plot(xs, means, marker="o", ms=3, label=row, color=color)
            ax.fill_between(xs, lows, highs, alpha=0.15, color=color)
        ax.set(xlabel="target position", ylabel="%", title="attention mass on the source" if kind == "mass"
               else "source share of the attention's contribution")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    fig.suptitle(f"{_title(runs, path)}: the source's share by target position, means over seeds (95 % bands)")
    return save_png(fig, path)


def _title(runs: pd.DataFrame, path: Path) -> str:
    """The study and profile a plot of this section belongs to (its file is STUDY_source_attention*.png)."""
    return plot_title(path.stem.split("_source_attention")[0], runs)
