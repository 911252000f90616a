"""Table 2's rival families in the report: quality against compute (dev BLEU curves against counted training
FLOPs and wall time, and the BLEU each row reaches at equal compute), and long-distance agreement by distance
(harness/eval/agreement.py's metrics), each with its plot. Plain pandas and matplotlib: reads MLflow only."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.report.cells import bracket_cell, md_table, num
from harness.report.claim_kinds.sooner import curves_by_seed, sooner
from harness.report.curves import plot_title, sci_log_labels
from harness.report.files import save_png
from harness.report.results import finished
from harness.report.stats import interval

_BUCKET = re.compile(r"^metrics\.agree_acc_d(\d+)(?:_(\d+)|(p))?$")


# ------------------------------------------------------------------------------------ agreement by distance

def agreement_buckets(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """The distance buckets the runs logged, in order: (metric suffix, label), e.g. ("d4_5", "4-5")."""
    found = []
    for col in runs.columns:
        m = _BUCKET.match(col)
        if m:
            lo, hi, open_ = int(m[1]), m[2], m[3]
            label = f"{lo}+" if open_ else f"{lo}-{hi}" if hi else f"{lo}"
            found.append((lo, col[len("metrics.agree_acc_"):], label))
    return [(name, label) for _, name, label in sorted(found)]


def agreement_section(runs: pd.DataFrame, order: list[str], path: Path) -> tuple[list[str], Path | None]:
    """Accuracy on the agreement contrasts by distance, per row: mean over finished seeds with its 95 %
    t-interval, the pairs per bucket beside; and the plot."""
    buckets = agreement_buckets(runs)
    rows = [r for r in order if len(finished(runs, r)) and "metrics.agree_acc" in runs
            and finished(runs, r)["metrics.agree_acc"].notna().any()]
    if not buckets or not rows:
        return [], None
    first = finished(runs, rows[0]).iloc[0]
    head = ["row", "seeds"] + [f"{label} (n={int(first[f'metrics.agree_n_{name}'])})" for name, label in buckets] + \
        [f"long, 4+ (n={int(first['metrics.agree_n_long'])})", f"all (n={int(first['metrics.agree_pairs'])})"]
    body = []
    for row in rows:
        done = finished(runs, row)
        cells = [bracket_cell(done[f"metrics.agree_acc_{name}"]) for name, _ in buckets]
        body.append([f"**{row}**", str(len(done)), *cells, bracket_cell(done["metrics.agree_acc_long"]),
                     bracket_cell(done["metrics.agree_acc"])])
    lines = ["## Long-distance agreement (§4), by distance", "",
             "§4 argues from path lengths that self-attention learns long-range dependencies more easily than "
             "recurrence or convolution. Measured here as Sennrich (2017) and Tang et al. (2018) did, without "
             "decoding: every trained row scores contrastive pairs, the reference and the same reference with the "
             "verb that agrees with its subject (or, in a subject relative clause, with the antecedent) put in the "
             "wrong number or gender, and is right when it gives the reference the higher probability. The pairs "
             "come from sentences of the row's own made-up corpus settings, drawn from a random stream that train, "
             "dev and test do not use (`python -m harness probe agreement RUN_DIR` scores a finished run the same "
             "way). Accuracy (%) by the distance in target words between the verb and the word it agrees with, "
             "the mean over seeds with its 95 % t-interval, and the number of pairs per bucket (the same sentences "
             "for every row). `long` is every pair at least 4 words apart, the buckets and that line fixed before "
             "any model was scored.", ""]
    lines += md_table(head, body) + [""]
    return lines, plot_agreement(runs, rows, buckets, path)


def plot_agreement(runs: pd.DataFrame, rows: list[str], buckets: list[tuple[str, str]], path: Path) -> Path:
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    xs = list(range(len(buckets)))
    for i, row in enumerate(rows):
        done = finished(runs, row)
        stats = [interval(done[f"metrics.agree_acc_{name}"]) for name, _ in buckets]
        means = [s[0] for s in stats]
        # an accuracy lies in [0, 100]: the t-interval is drawn clipped there
        errs = [[0 if math.isnan(s[1]) else s[0] - max(s[1], 0.0) for s in stats],
                [0 if math.isnan(s[2]) else min(s[2], 100.0) - s[0] for s in stats]]
        ax.errorbar([x + 0.06 * (i - len(rows) / 2) for x in xs], means, yerr=errs, marker="o", capsize=3,
                    label=f"{row} ({len(done)} seed{'s' * (len(done) != 1)})")
    ax.set_xticks(xs, [label for _, label in buckets])
    ax.set(xlabel="distance between the verb and the word it agrees with (target words)",
           ylabel="contrastive accuracy (%)",
           title=f"{plot_title(path.stem.removesuffix('_agreement'), runs)}: agreement by distance (95 % "
                 "intervals over seeds)")
    ax.legend(fontsize=8)
    return save_png(fig, path)


# ------------------------------------------------------------------------------------ quality against compute

def at_budget(curve: list[tuple[float, float, float]], budget: float, axis: int) -> float:
    """The curve's BLEU at `budget` on axis 0 (FLOPs, interpolated in log FLOPs) or 1 (seconds): NaN outside
    the points it logged."""
    pts = sorted((p[axis], p[2]) for p in curve)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= budget <= x1:
            if x1 == x0:
                return y1
            f = (math.log(budget) - math.log(x0)) / (math.log(x1) - math.log(x0)) if axis == 0 else \
                (budget - x0) / (x1 - x0)
            return y0 + f * (y1 - y0)
    return pts[-1][1] if pts and math.isclose(pts[-1][0], budget) else float("nan")


def compute_section(runs: pd.DataFrame, uri: str, order: list[str], path: Path,
                    sooner_rows: tuple[str, tuple[str, ...]] | None = None) -> tuple[list[str], Path | None]:
    """Dev BLEU against training FLOPs and wall time, per row, and each row's BLEU at the smallest row's
    final budget (equal compute), both ways. sooner_rows (a row and its rivals, a "sooner" claim's): where, seed
    by seed, the row first reached each rival's best dev BLEU and where the rival did, marked on the plot."""
    by_seed = {row: curves_by_seed(runs, uri, row) for row in order}
    by_row = {row: [c for _, c in sorted(seeds.items())] for row, seeds in by_seed.items() if seeds}
    marks = []           # (rival, axis, best BLEU, the rival's x, the row's x)
    if sooner_rows and sooner_rows[0] in by_seed:
        for rival in sooner_rows[1]:
            for axis in (0, 1):
                for best, x_rival, x_base in sooner(by_seed[sooner_rows[0]], by_seed.get(rival, {}), axis).values():
                    marks.append((rival, axis, best, x_rival, x_base))
    if not by_row:
        return [], None
    # Equal compute: the budget every row reached, the smallest of the rows' final FLOPs (and seconds).
    flops_budget = min(min(seed[-1][0] for seed in c) for c in by_row.values())
    secs_budget = min(min(seed[-1][1] for seed in c) for c in by_row.values())
    body = []
    for row, c in by_row.items():
        final = [seed[-1] for seed in c]
        body.append([f"**{row}**", str(len(c)), num(sum(f[0] for f in final) / len(final), "{:.2e}"),
                     num(sum(f[1] for f in final) / len(final) / 60, "{:.1f}"), bracket_cell([f[2] for f in final]),
                     bracket_cell([at_budget(seed, flops_budget, 0) for seed in c]),
                     bracket_cell([at_budget(seed, secs_budget, 1) for seed in c])])
    lines = ["## Quality against compute", "",
             "Every row logged a dev BLEU curve while it trained: greedy translations of the first dev sentences "
             "(`train.curve_bleu_sentences`), tokenized BLEU, at each dev evaluation and at the last step (before "
             "checkpoint averaging, so the last point is the trained weights', not the table's averaged score). "
             "Training FLOPs are the row's counted FLOPs per target token times the target tokens seen; wall time is "
             "the training seconds on this machine (evaluation excluded). At equal compute: each row's curve read at "
             f"the smallest final budget of any row, {flops_budget:.2e} FLOPs and {secs_budget / 60:.1f} minutes "
             "(interpolated between logged points, in log FLOPs), mean over seeds with its 95 % t-interval.", ""]
    lines += md_table(["row", "seeds", "training FLOPs", "training (min)", "final curve BLEU",
                       f"BLEU at {flops_budget:.2e} FLOPs", f"BLEU at {secs_budget / 60:.1f} min"], body) + [""]
    if marks:
        lines += [f"Marked on the plot (the claim trains_faster_than_rivals reads them): for each seed, where "
                  f"{sooner_rows[0]} first reached each rival's best dev BLEU (×) and where the rival reached it (○), "
                  "on both axes.", ""]
    return lines, plot_compute(by_row, flops_budget, secs_budget, path, marks, sooner_rows[0] if marks else None,
                               plot_title(path.stem.removesuffix("_bleu_vs_compute"), runs))


def plot_compute(by_row: dict, flops_budget: float, secs_budget: float, path: Path, marks: list = (),
                 base: str | None = None, title: str = "") -> Path:
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    if title:
        fig.suptitle(title)
    axes = fig.subplots(1, 2)
    colour = {row: f"C{i % 10}" for i, row in enumerate(by_row)}
    for rival, axis, best, x_rival, x_base in marks:
        scale = 1.0 if axis == 0 else 1 / 60
        if not math.isnan(x_base):
            axes[axis].plot([x_base * scale], [best], marker="x", ms=8, mew=2, color=colour.get(base, "k"), ls="none")
        if not math.isnan(x_rival):
            axes[axis].plot([x_rival * scale], [best], marker="o", ms=8, mfc="none", mew=1.5,
                            color=colour.get(rival, "k"), ls="none")
    for i, (row, c) in enumerate(by_row.items()):
        for j, seed in enumerate(c):
            for ax, axis, scale in ((axes[0], 0, 1.0), (axes[1], 1, 1 / 60)):
                ax.plot([p[axis] * scale for p in seed], [p[2] for p in seed], color=f"C{i % 10}", lw=1, marker=".",
                        ms=3, label=row if j == 0 else None)
    axes[0].axvline(flops_budget, color="gray", ls=":", lw=1)
    axes[1].axvline(secs_budget / 60, color="gray", ls=":", lw=1)
    axes[0].set(xscale="log", xlabel="training FLOPs (counted)", ylabel="dev BLEU (greedy, tokenized)",
                title="dev BLEU against training compute")
    axes[1].set(xlabel="training time on this machine (min)", ylabel="dev BLEU (greedy, tokenized)",
                title="dev BLEU against wall time")
    sci_log_labels(axes[0].xaxis)     # 2x10^13, 5x10^13, 10^14 ...: one decade label alone says little
    if marks:        # what the markers mean, once
        axes[0].plot([], [], marker="x", ls="none", color="0.3", label=f"{base} reaches a rival's best")
        axes[0].plot([], [], marker="o", mfc="none", ls="none", color="0.3", label="the rival reaches its best")
    axes[0].legend(fontsize=8)
    return save_png(fig, path)
