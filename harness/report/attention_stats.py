"""§3.2.1's measurements in a study's report (harness/eval/attention_stats.py's attn_* metrics): each row's
attention before the first update and after training, and how its softmax and its query/key gradients moved
during training. Plain pandas and matplotlib: reads MLflow's runs and metric histories only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness import logged
from harness.report.cells import interval_cell, md_table
from harness.report.curves import plain_log_labels, plot_title, series_style
from harness.report.files import save_png
from harness.report.results import finished

# (metric, its column head, format)
SHOWN = (("attn_logit_var", "logit var", "{:.3g}"), ("attn_max_prob", "max prob", "{:.3f}"),
         ("attn_entropy_ratio", "entropy / ln keys", "{:.3f}"), ("attn_qk_grad_norm", "‖∇W^Q,K‖", "{:.3g}"))


def _histories(uri: str, done: pd.DataFrame, key: str) -> list[dict[int, float]]:
    return [dict(logged.metric_history(uri, run_id, key)) for run_id in done["run_id"]]


def attention_stats_section(runs: pd.DataFrame, order: list[str], uri: str, path: Path) -> tuple[list[str], list[Path]]:
    """The section's lines (its plot's image link among them) and its plot, or ([], []) where no run measured
    the attention."""
    if "metrics.attn_max_prob" not in runs:
        return [], []
    rows = [r for r in order if len(finished(runs, r)) and finished(runs, r)["metrics.attn_max_prob"].notna().any()]
    if not rows:
        return [], []
    head = ["row", "score", "d_k", *(f"init: {name}" for _, name, _ in SHOWN),
            *(f"end: {name}" for _, name, _ in SHOWN)]
    body, curves, widths = [], {}, {}
    for row in rows:
        done = finished(runs, row)
        first = done.iloc[0]
        score = first.get("params.model.attention_score", "scaled")
        score = score if isinstance(score, str) else "scaled"
        init, end = [], []
        for key, _, fmt in SHOWN:
            hist = _histories(uri, done, key)
            curves[(row, key)] = hist
            init.append(interval_cell([h[0] for h in hist if 0 in h], fmt))
            end.append(interval_cell(done[f"metrics.{key}"].dropna(), fmt))
        widths[row] = str(first.get("params.model.d_k", "–"))
        body.append([f"**{row}**", score, widths[row], *init, *end])
    lines = ["## Why the dot products are scaled (§3.2.1)", "",
             "Each trial measured its attention on the first dev sentences as one batch "
             "(`train.attention_stats_sentences`, harness/eval/attention_stats.py), teacher-forced with dropout off, "
             "before the first update (`init`) and on the final weights (`end`): the variance of the logits the "
             "softmax is given, the largest attention probability of each real query (near 1: the softmax has "
             "saturated onto one key), the attention distribution's entropy over that of uniform attention over the "
             "same keys, and the norm of the loss's gradient with respect to every W^Q and W^K (what the softmax's "
             "saturation would starve). Each figure is the mean over layers; means over seeds ± half their 95 % "
             "t-interval. The plot follows the largest probability and the gradient norm through training (every "
             "evaluation).", ""] + md_table(head, body) + [""]
    # the rows are named in the paper's units (scaled_dk256); the legend gives the d_k each ran at
    labels = {row: f"{row} (d_k {widths[row]})" for row in rows}
    plot = _plot(rows, curves, path, plot_title(path.stem.removesuffix("_attention_stats"), runs), labels)
    return lines + [f"![{plot.stem}]({plot.name})", ""], [plot]


def _plot(rows: list[str], curves: dict, path: Path, title: str, labels: dict[str, str]) -> Path:
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, key, label in ((axes[0], "attn_max_prob", "largest attention probability"),
                           (axes[1], "attn_qk_grad_norm", "‖∇ W^Q, W^K‖")):
        for i, row in enumerate(rows):
            hist = [h for h in curves[(row, key)] if h]
            steps = sorted(set.intersection(*(set(h) for h in hist))) if hist else []
            if not steps:
                continue
            means = [sum(h[s] for h in hist) / len(hist) for s in steps]
            ax.plot(steps, means, ms=3, label=labels.get(row, row), **series_style(i))
        ax.set(xlabel="training step", ylabel=label)
        if key == "attn_qk_grad_norm":
            ax.set_yscale("log")
            plain_log_labels(ax.yaxis)
    fig.suptitle(f"{title}: the softmax's saturation and the W^Q, W^K gradients through training", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7)
    return save_png(fig, path)
