"""§3.5's length extrapolation in a study's report (harness/eval/extrapolation.py's len_b* metrics): each row's
perplexity, BLEU and agreement accuracy by source-length bucket, the first bucket the training lengths, with a
plot. Plain pandas and matplotlib: reads MLflow's runs only."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.report.cells import interval_cell, md_table
from harness.report.curves import plain_log_labels, plot_title
from harness.report.files import save_png
from harness.report.results import finished

SHOWN = (("ppl", "perplexity", "{:.2f}"), ("bleu", "BLEU (tokenized)", "{:.1f}"),
         ("agree", "agreement accuracy (%)", "{:.1f}"))


def _buckets(runs: pd.DataFrame) -> list[tuple[int, str]]:
    """(bucket index, its label "lo-hi words") for every bucket some run logged."""
    found = sorted({int(m[1]) for c in runs.columns if (m := re.match(r"^metrics\.len_b(\d+)_ppl$", c))})
    out = []
    for i in found:
        lo, hi = runs[f"metrics.len_b{i}_lo"].dropna(), runs[f"metrics.len_b{i}_hi"].dropna()
        out.append((i, f"{int(lo.iloc[0])}-{int(hi.iloc[0])}" if len(lo) and len(hi) else f"bucket {i}"))
    return out


def length_section(runs: pd.DataFrame, order: list[str], path: Path) -> tuple[list[str], list[Path]]:
    """The section's lines (its plot's image link among them) and its plot, or ([], []) where no run measured it."""
    buckets = _buckets(runs)
    if not buckets:
        return [], []
    rows = [r for r in order if len(finished(runs, r)) and finished(runs, r)["metrics.len_b0_ppl"].notna().any()]
    if not rows:
        return [], []
    n = runs[[f"metrics.len_b{i}_n" for i, _ in buckets if f"metrics.len_b{i}_n" in runs]].max().dropna()
    lines = ["## Length extrapolation (§3.5)", "",
             "Each trial trained on sentences of at most the first bucket's length and was then scored on sentences "
             "of the same grammar and lexicon in buckets of source length in words (`train.length_sentences` "
             f"sentences each, up to {int(n.max()) if len(n) else '–'}; harness/eval/extrapolation.py), from a random "
             "stream none of train, dev and test use: the references' perplexity, the beam search's tokenized BLEU, "
             "and the accuracy on the bucket's subject-verb agreement contrasts. Means over seeds ± half their "
             "95 % t-intervals. Learned positions past the training lengths are their table's untrained rows.", ""]
    for key, name, fmt in SHOWN:
        head = ["row", "seeds", *(f"{label} words" + (" (trained)" if i == 0 else "") for i, label in buckets)]
        body = []
        for row in rows:
            done = finished(runs, row)
            body.append([f"**{row}**", str(len(done)),
                         *(interval_cell(done[f"metrics.len_b{i}_{key}"].dropna(), fmt)
                           if f"metrics.len_b{i}_{key}" in done
                           else "–" for i, _ in buckets)])
        lines += [f"**{name}**, by source length:", ""] + md_table(head, body) + [""]
    plot = _plot(runs, rows, buckets, path)
    return lines + [f"![{plot.stem}]({plot.name})", ""], [plot]


def _plot(runs: pd.DataFrame, rows: list[str], buckets: list[tuple[int, str]], path: Path) -> Path:
    fig = Figure(figsize=(13, 4), layout="constrained")
    axes = fig.subplots(1, len(SHOWN))
    xs = list(range(len(buckets)))
    for ax, (key, name, _) in zip(axes, SHOWN):
        for j, row in enumerate(rows):
            done = finished(runs, row)
            cols = [f"metrics.len_b{i}_{key}" for i, _ in buckets]
            means = [done[c].mean() if c in done else float("nan") for c in cols]
            ax.plot(xs, means, marker="o", ms=4, color=f"C{j % 10}", label=row)
        ax.axvspan(-0.4, 0.4, color="0.9", zorder=0)                 # the training lengths
        ax.set_xticks(xs, [label for _, label in buckets], fontsize=8)
        ax.set(xlabel="source length (words); shaded: trained", title=name)
        if key == "ppl":
            ax.set_yscale("log")
            plain_log_labels(ax.yaxis)      # a PPL from 1 to 20 carried only 10^0 and 10^1
        ax.legend(fontsize=7)
    seeds = min((len(finished(runs, r)) for r in rows), default=0)
    fig.suptitle(f"{plot_title(path.stem.removesuffix('_length'), runs)}: by source length, the mean over "
                 f"{seeds} seed{'s' * (seeds != 1)} a row", fontsize=10)
    return save_png(fig, path)


def pi_section(runs: pd.DataFrame, order: list[str]) -> tuple[list[str], list[Path]]:
    """RoPE position interpolation (harness/eval/rope_pi.py): per row that measured it, each length bucket's PPL
    after the plain fine-tune and after the interpolated one, and their difference in ln PPL, over seeds."""
    rows = [r for r in order if "metrics.pi_plain_b0_ppl" in runs and finished(runs, r)["metrics.pi_plain_b0_ppl"]
            .notna().any()]
    if not rows:
        return [], []
    buckets = _buckets(runs)
    lines = ["## RoPE position interpolation", "",
             "From each row's final weights, two brief fine-tunes on sentences of up to `train.rope_pi_factor` times "
             "the training length (the same steps, sentences and rate: the run's last), one with RoPE's positions as "
             "they are and one interpolated (position p turned as p / factor: Chen et al. 2023), each then scored on "
             "the length buckets above; the weights are restored afterwards. Δ = ln PPL plain − interpolated (> 0: "
             "interpolation reads the longer sentences better). Means over seeds ± half their 95 % t-intervals.", ""]
    for row in rows:
        done = finished(runs, row)
        col = lambda k: done[f"metrics.{k}"].dropna() if f"metrics.{k}" in done else pd.Series(dtype=float)  # noqa: E731
        body = [[f"{label} words" + (" (trained)" if i == 0 else ""), interval_cell(col(f"pi_plain_b{i}_ppl")),
                 interval_cell(col(f"pi_interp_b{i}_ppl")), interval_cell(col(f"pi_gain_b{i}_nll"), "{:+.3f}")]
                for i, label in buckets]
        factor, steps = col("pi_factor"), col("pi_steps")
        lines += [f"**{row}** ({len(done)} seeds; fine-tuned {int(steps.iloc[0]) if len(steps) else '?'} steps on "
                  f"sentences up to {factor.iloc[0]:g} x the training length):" if len(factor) else f"**{row}**:", "",
                  *md_table(["source length", "PPL, plain fine-tune", "PPL, interpolated", "Δ ln PPL"], body), ""]
    return lines, []
