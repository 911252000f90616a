"""The statements report (studies/statements.yaml): the paper's statements in its text that no table prints, each
measured: §4's crossover of self-attention and recurrence (with the plot of time against n, n = d marked), §3.2.2's
multi-head cost, §3.2.1's dot-product against additive attention, §3.5's offset linearity, §4's convolutions against
recurrence and the separable form; then the claims. Reads
MLflow only (each point as the trial logged it, step = n, heads, d_k or the offset k)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from harness import logged
from harness.report.cells import bracket_cell, md_table, num
from harness.report.claims_section import claims_section
from harness.report.curves import plain_log_labels, plot_title
from harness.report.files import save_png, write_files
from harness.report.header import header_lines
from harness.report.results import row_order


def _history(uri: str, runs: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    """Every point the runs logged under `keys`: one line per run and step (row, seed, step, key: value)."""
    records: dict[tuple, dict] = {}
    for run_id, row, seed in zip(runs["run_id"], runs["tags.row"].astype(str), runs["tags.seed"]):
        for key in keys:
            for step, value in logged.metric_history(uri, run_id, key):
                records.setdefault((row, seed, step), {"row": row, "seed": seed, "step": step})[key] = value
    return pd.DataFrame(list(records.values()))


def _of(done: pd.DataFrame, row: str, metric: str) -> list[float]:
    g = done[done["tags.row"].astype(str) == row]
    col = f"metrics.{metric}"
    return pd.to_numeric(g[col], errors="coerce").dropna().tolist() if col in g else []


def _param(done: pd.DataFrame, row: str, key: str):
    g = done[done["tags.row"].astype(str) == row]
    col = f"params.probe.{key}"
    return g[col].iloc[0] if col in g and len(g) else None


def _rows_of(done: pd.DataFrame, measure: str) -> list[str]:
    col = "params.probe.measure"
    if col not in done:
        return []
    return [r for r in row_order(done) if (done.loc[done["tags.row"].astype(str) == r, col] == measure).any()]


# ------------------------------------------------------------------------------------------ §4 crossover

def crossover_section(done: pd.DataFrame, uri: str, out_dir: Path, study: str, title: str) -> tuple[list, list, list]:
    rows = _rows_of(done, "crossover")
    if not rows:
        return [], [], []
    hist = _history(uri, done[done["tags.row"].astype(str).isin(rows)],
                    ("attention_s", "recurrent_s", "attention_flops", "recurrent_flops"))
    body, records = [], []
    for row in rows:
        d = int(float(_param(done, row, "d")))
        n_max = int(hist[hist["row"] == row]["step"].max()) if len(hist) else 0
        side = _of(done, row, "crossover_side_time")
        time_cell = bracket_cell(_of(done, row, "crossover_n_time"), "{:.0f}")
        if side and all(s > 0 for s in side):
            time_cell = f"> {n_max} (attention faster at every n measured)"
        elif side and all(s < 0 for s in side):
            time_cell = f"< {n_max} (attention slower at every n measured)"
        body.append([f"**{row}**", d, _param(done, row, "batch"), _param(done, row, "recurrent"),
                     bracket_cell(_of(done, row, "crossover_n_flops"), "{:.0f}"),
                     bracket_cell(_of(done, row, "crossover_flops"), "{:+.3f}"), time_cell,
                     bracket_cell(_of(done, row, "crossover_time"), "{:+.2f}")])
        records.append({"row": row, "measure": "crossover", "d": d,
                        "n_star_flops": _mean(_of(done, row, "crossover_n_flops")),
                        "log2_flops": _mean(_of(done, row, "crossover_flops")),
                        "n_star_time": _mean(_of(done, row, "crossover_n_time")),
                        "log2_time": _mean(_of(done, row, "crossover_time"))})
    lines = ["## §4: where self-attention stops being cheaper than recurrence", "",
             "A self-attention layer (q = k = v = x, no projections: Table 1's O(n² · d)) against a recurrent layer "
             "(O(n · d²)), one forward and backward of a batch, over n from d/8 upward at each width d, stopped once "
             "both the FLOPs and the time have crossed. n* is where attention's cost reaches the recurrent layer's, "
             "interpolated on log n and log cost between the two measured n around it; the claim reads log2(n*/d), "
             "0 where n* = d. FLOPs are counted by torch's FlopCounterMode on the same attention written as matmuls "
             "(the counter does not see inside the CPU's fused kernel); time is the fused kernel's. Where no crossing "
             "lies inside the measured n, the edge of the grid bounds it and the claim reads that bound only when it "
             "already lies more than a factor of 2 from d.", "",
             *md_table(["row", "d", "batch", "recurrent layer", "n* (FLOPs)", "log2(n*/d), FLOPs", "n* (time)",
                        "log2(n*/d), time"], body), ""]
    notes = _crossover_notes(done, rows)
    if notes:
        lines += notes + [""]
    plot = plot_crossover(hist, done, rows, out_dir / f"{study}_crossover.png", title)
    return lines + [f"![{plot.stem}]({plot.name})", ""], records, [plot]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _crossover_notes(done: pd.DataFrame, rows: list[str]) -> list[str]:
    """Where the measured crossover parts from n = d: why, as the measurements show it."""
    far = [r for r in rows if any(abs(x) > 1 for x in _of(done, r, "crossover_time"))
           or any(s != 0 for s in _of(done, r, "crossover_side_time"))]
    if not far:
        return []
    return [f"Measured time crosses far from n = d at {', '.join(far)}: a finding about kernels, not about the "
            "arithmetic (whose crossing the FLOPs column shows at n = d). The recurrent layer takes n dependent steps, "
            "each a (batch × d) by (d × d) product: at batch 4 these are thin matrix products that read the whole "
            "d × d weight matrix per step, bound by memory traffic and a fixed cost per step, while attention's "
            "n × n products run as a few large, efficient matrix multiplications. Per FLOP the recurrent layer is "
            "therefore slower, and attention stays cheaper in time to an n well above d."]


def plot_crossover(hist: pd.DataFrame, done: pd.DataFrame, rows: list[str], path: Path, title: str) -> Path:
    """One panel per d: forward + backward time against n (top) and counted FLOPs (bottom), self-attention and
    the recurrent layer, the median over seeds at each n; n = d marked."""
    fig = Figure(figsize=(4.6 * len(rows), 7.4), layout="constrained")
    axes = fig.subplots(2, len(rows), squeeze=False)
    for j, row in enumerate(rows):
        d = int(float(_param(done, row, "d")))
        g = hist[hist["row"] == row].groupby("step").median(numeric_only=True).sort_index()
        for i, (att, rec, unit) in enumerate((("attention_s", "recurrent_s", "seconds"),
                                              ("attention_flops", "recurrent_flops", "FLOPs"))):
            ax = axes[i][j]
            if att in g and rec in g:
                ax.plot(g.index, g[att], marker="o", color="C0", label="self-attention")
                ax.plot(g.index, g[rec], marker="s", color="C1", label=f"recurrent ({_param(done, row, 'recurrent')})")
            ax.axvline(d, color="0.3", linestyle="--", linewidth=1, label="n = d")
            key = "crossover_n_time" if i == 0 else "crossover_n_flops"
            side = _of(done, row, "crossover_side_time" if i == 0 else "crossover_side_flops")
            n_star = _mean(_of(done, row, key))
            if side and all(s == 0 for s in side) and n_star == n_star:
                ax.axvline(n_star, color="C3", linestyle=":", linewidth=1.5, label=f"n* = {n_star:.0f}")
            ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel=f"forward + backward {unit}",
                   title=f"d = {d}: {'measured time' if i == 0 else 'counted FLOPs'}")
            ns = [int(n) for n in g.index]
            ax.set_xticks(ns, [str(n) for n in ns])       # the lengths measured, no crowded minor labels
            ax.xaxis.set_minor_locator(NullLocator())
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{title}: self-attention against recurrence as n grows (§4)", fontsize=10)
    return save_png(fig, path)


# ------------------------------------------------------------------------------------------ §3.2.2 multi-head

def multi_head_section(done: pd.DataFrame) -> tuple[list, list]:
    rows = _rows_of(done, "multi_head")
    if not rows:
        return [], []
    body, records = [], []
    for row in rows:
        h = _param(done, row, "heads")
        body.append([f"**{row}**", _param(done, row, "d_model"), h,
                     f"{_param(done, row, 'batch')} × {_param(done, row, 'n')}",
                     num(_mean(_of(done, row, "mh_flops_many")) / 1e6, "{:,.1f}"),
                     num(_mean(_of(done, row, "mh_flops_one")) / 1e6, "{:,.1f}"),
                     bracket_cell(_of(done, row, "mh_flops_ratio"), "{:.4f}"),
                     bracket_cell(_of(done, row, "mh_ms_many"), "{:.3f}"),
                     bracket_cell(_of(done, row, "mh_ms_one"), "{:.3f}"),
                     bracket_cell(_of(done, row, "mh_time_ratio"), "{:.2f}")])
        records.append({"row": row, "measure": "multi_head", "d_model": _param(done, row, "d_model"),
                        "flops_ratio": _mean(_of(done, row, "mh_flops_ratio")),
                        "time_ratio": _mean(_of(done, row, "mh_time_ratio"))})
    lines = ["## §3.2.2: h heads of d_model / h against one head of d_model", "",
             "The model's own multi-head self-attention (model/attention.py: the fused Q, K, V projection, the "
             "attention, W^O), one forward and backward, h heads of d_k = d_v = d_model / h against one head of "
             "d_model. FLOPs counted (FlopCounterMode, the attention written out as matmuls); time measured with the "
             "kernel the model picks on this device. Means over the seeds (repeats) with 95 % intervals.", "",
             *md_table(["row", "d_model", "h", "batch × n", "MFLOPs, h heads", "MFLOPs, 1 head", "FLOPs ratio",
                        "ms, h heads", "ms, 1 head", "time ratio"], body), "",
             "The counted FLOPs are the same by construction of the arithmetic (h products of d_model / h columns "
             "make one of d_model); the time is what a user pays: h smaller matrix products and the reshapes "
             "between heads cost more per FLOP than one large product, most where d_k is small.", ""]
    return lines, records


# ------------------------------------------------------------------------------------------ §3.2.1 dot vs additive

def dot_additive_section(done: pd.DataFrame, uri: str) -> tuple[list, list]:
    rows = _rows_of(done, "dot_vs_additive")
    if not rows:
        return [], []
    hist = _history(uri, done[done["tags.row"].astype(str).isin(rows)], ("ms", "mem_bytes"))
    device = str(done["tags.device"].dropna().iloc[0]) if "tags.device" in done and done["tags.device"].notna().any() \
        else "?"
    memory = "CUDA's allocator peak" if device.startswith("cuda") else \
        "the largest tensor any op of the step produced (a CPU keeps no allocator statistics; a lower bound of the " \
        "peak)"
    body, records = [], []
    for step in sorted(hist["step"].unique()) if len(hist) else []:
        cells = [int(step)]
        per = {}
        for row in rows:
            g = hist[(hist["row"] == row) & (hist["step"] == step)]
            per[row] = (g["ms"].tolist(), g["mem_bytes"].tolist())
            cells += [bracket_cell(per[row][0], "{:.3f}"), num(_mean(per[row][1]) / 2**20, "{:.2f}")]
        if len(rows) == 2:
            (a_ms, a_mem), (b_ms, b_mem) = per[rows[0]], per[rows[1]]
            cells += [num(_mean(b_ms) / _mean(a_ms), "{:.2f}") if a_ms and b_ms else "–",
                      num(_mean(b_mem) / _mean(a_mem), "{:.1f}") if a_mem and b_mem else "–"]
        body.append(cells)
    totals = []
    for row in rows:
        records.append({"row": row, "measure": "dot_vs_additive", "score": _param(done, row, "score"),
                        "ms_total": _mean(_of(done, row, "attn_ms")),
                        "mem_bytes": _mean(_of(done, row, "attn_mem_bytes"))})
        totals.append([f"**{row}**", _param(done, row, "score"), bracket_cell(_of(done, row, "attn_ms"), "{:.2f}"),
                       num(_mean(_of(done, row, "attn_mem_bytes")) / 2**20, "{:.2f}")])
    head = ["d_k"] + [x for row in rows for x in (f"{row}: ms", f"{row}: MiB")] + \
        ([f"time, {rows[1]} / {rows[0]}", f"memory, {rows[1]} / {rows[0]}"] if len(rows) == 2 else [])
    first = rows[0]
    lines = ["## §3.2.1: dot-product against additive attention", "",
             f"The model's attention with each score (model/attention.py: `{_param(done, first, 'score')}` and the "
             "others'), one forward and backward at equal d_k, at studies/scaling_dk.yaml's tiny shapes (d_model "
             f"{_param(done, first, 'd_model')}, h {_param(done, first, 'heads')}, {_param(done, first, 'batch')} "
             f"sentences of {_param(done, first, 'n')} tokens). Time: mean over the seeds (repeats) with its 95 % "
             f"interval. Memory: {memory}. The claim compares the times summed over the d_k and the largest memory.",
             "", *md_table(["row", "score", "ms, summed over the d_k", "MiB, the largest"], totals), "",
             "By d_k:", "", *md_table(head, body), "",
             "Additive attention scores each query-key pair through tanh(W q + U k) · w: written out, it builds a "
             "(batch × heads × queries × keys × d_k) tensor where the dot product builds (batch × heads × queries × "
             "keys), so its memory and time grow d_k times faster.", ""]
    return lines, records


# ------------------------------------------------------------------------------------------ §3.5 offsets

def offset_section(done: pd.DataFrame, uri: str, out_dir: Path, study: str, title: str) -> tuple[list, list, list]:
    rows = _rows_of(done, "offset")
    if not rows:
        return [], [], []
    hist = _history(uri, done[done["tags.row"].astype(str).isin(rows)], ("residual", "residual_halves"))
    body, records = [], []
    for row in rows:
        body.append([f"**{row}**", _param(done, row, "embedding"), _param(done, row, "d"),
                     _param(done, row, "positions"), _param(done, row, "max_offset"),
                     bracket_cell(_of(done, row, "offset_residual"), "{:.3g}"),
                     bracket_cell(_of(done, row, "offset_residual_halves"), "{:.3g}")])
        records.append({"row": row, "measure": "offset", "embedding": _param(done, row, "embedding"),
                        "residual": _mean(_of(done, row, "offset_residual")),
                        "residual_halves": _mean(_of(done, row, "offset_residual_halves"))})
    lines = ["## §3.5: PE_pos+k as a linear function of PE_pos", "",
             "For each offset k, the least-squares linear map M with PE_pos M = PE_pos+k, fitted on the even "
             "positions and tested on the odd ones, in float64 (SVD least squares, the minimum-norm map); the "
             "residual is ||X_test M − Y_test|| / ||Y_test||, the largest over k. For the sinusoid the exact map "
             "exists (a rotation of each (sin, cos) pair by k times its frequency), so only round-off remains; a "
             "learned table (the model's, as initialized: Table 3 row E's, one draw a seed) has no such map.", "",
             *md_table(["row", "table", "d", "positions", "offsets k", "held-out residual (largest over k)",
                        "fitted on the first half, tested on the second"], body), "",
             "The last column extrapolates instead (the map fitted on positions 0 .. n/2, tested beyond): it is "
             "large for the sinusoid too. The lowest frequencies barely turn over a thousand positions, so their "
             "columns are nearly collinear within the first half, and the minimum-norm map that fits them there "
             "differs from the exact rotation in directions the second half does see. The property the paper "
             "states, that a linear map exists, is the first column's; that it can be found from a prefix alone "
             "is not what the paper says.", ""]
    plot = plot_offsets(hist, rows, out_dir / f"{study}_offsets.png", title)
    return lines + [f"![{plot.stem}]({plot.name})", ""], records, [plot]


def plot_offsets(hist: pd.DataFrame, rows: list[str], path: Path, title: str) -> Path:
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.add_subplot()
    for i, row in enumerate(rows):
        g = hist[hist["row"] == row].groupby("step").median(numeric_only=True).sort_index()
        if "residual" in g:
            ax.plot(g.index, g["residual"], color=f"C{i}", marker="o", markersize=3, label=f"{row}: even → odd")
        if "residual_halves" in g:
            ax.plot(g.index, g["residual_halves"], color=f"C{i}", linestyle=":", label=f"{row}: first half → second")
    ax.axhline(1e-6, color="0.3", linestyle="--", linewidth=1, label="the claim's threshold 1e-6")
    ax.set(yscale="log", xlabel="offset k", ylabel="held-out relative residual")
    fig.suptitle(f"{title}: is PE_pos+k linear in PE_pos? (§3.5)", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=7)
    return save_png(fig, path)


# ------------------------------------------------------------------------------------------ §4 convolutions

_CONV_KEYS = ("conv_flops", "separable_flops", "recurrent_flops", "conv_s", "separable_s", "recurrent_s")


def conv_section(done: pd.DataFrame, uri: str, out_dir: Path, study: str, title: str) -> tuple[list, list, list]:
    rows = _rows_of(done, "conv_cost")
    if not rows:
        return [], [], []
    hist = _history(uri, done[done["tags.row"].astype(str).isin(rows)], _CONV_KEYS)
    lines, records, by_k, summary = ["## §4: convolutions against recurrence, and the separable form", ""], [], [], []
    for row in rows:
        g = hist[hist["row"] == row]
        body = []
        for k in sorted(g["step"].unique()) if len(g) else []:
            at = g[g["step"] == k]
            body.append([int(k), *(num(at[f].median() / 1e6, "{:,.1f}") for f in _CONV_KEYS[:3]),
                         *(bracket_cell((1e3 * at[f]).tolist(), "{:.2f}") for f in _CONV_KEYS[3:]),
                         num(at["conv_flops"].median() / at["recurrent_flops"].median(), "{:.2f}"),
                         bracket_cell((at["conv_s"] / at["recurrent_s"]).tolist(), "{:.2f}"),
                         num(at["conv_flops"].median() / at["separable_flops"].median(), "{:.2f}"),
                         bracket_cell((at["conv_s"] / at["separable_s"]).tolist(), "{:.2f}")])
        exps = {m: _of(done, row, m) for m in ("conv_k_exp_flops", "conv_k_exp_time", "sep_gain_exp_flops",
                                               "sep_gain_exp_time")}
        records.append({"row": row, "measure": "conv_cost", "d": _param(done, row, "d"),
                        **{m: _mean(v) for m, v in exps.items()}})
        shape = f"{_param(done, row, 'batch')} × {_param(done, row, 'n')}"
        summary.append([f"**{row}**", _param(done, row, "d"), shape, _param(done, row, "recurrent"),
                        bracket_cell(exps["conv_k_exp_flops"], "{:.3f}"),
                        bracket_cell(exps["conv_k_exp_time"], "{:.2f}"),
                        bracket_cell(exps["sep_gain_exp_flops"], "{:.3f}"),
                        bracket_cell(exps["sep_gain_exp_time"], "{:.2f}")])
        by_k += [f"By kernel width k, {row} (forward MFLOPs counted; forward + backward ms measured, mean over the "
                 "seeds with its 95 % interval):", "",
                 *md_table(["k", "conv MFLOPs", "separable MFLOPs", "recurrent MFLOPs", "conv ms", "separable ms",
                            "recurrent ms", "conv / recurrent, FLOPs", "conv / recurrent, time",
                            "conv / separable, FLOPs", "conv / separable, time"], body), "", *_conv_level(g, row)]
    lines += ["How each cost ratio grows with the kernel width k: its exponent in k (the paper: k^1 for a convolution "
              "over a recurrent layer, and for a convolution over its separable form where d >> k).", "",
              *md_table(["row", "d", "batch × n", "recurrent layer", "conv / recurrent, FLOPs",
                         "conv / recurrent, time", "conv / separable, FLOPs", "conv / separable, time"], summary), "",
              *by_k]
    lines += ["The convolution is Table 1's (harness/probes/scaling.py: causal, kernel width k, d channels in and "
              "out), its separable form a depthwise convolution of width k followed by a pointwise (1 × 1) one, the "
              "recurrent layer one tanh step per position. The exponent is the least-squares slope of log ratio on "
              "log k. FLOPs are the forward's: torch's FlopCounterMode counts a grouped (depthwise) convolution's "
              "weight gradient as if it were a full convolution's, d times too many, so the backward is left out of "
              "the count (it is twice the forward for every layer here). The recurrent layer's cost does not depend "
              "on k, so conv / recurrent grows as the convolution's own cost; conv / separable grows as k d / (k + d), "
              "nearly k^1 where d is large against k.", ""]
    plot = plot_conv(hist, rows, out_dir / f"{study}_convolutions.png", title)
    return lines + [f"![{plot.stem}]({plot.name})", ""], records, [plot]


def _conv_level(g: pd.DataFrame, row: str) -> list[str]:
    """Where a convolution stands against the recurrent layer, not only how the ratio grows: counted, its forward
    costs k/2 of nn.RNN's (k products a position against the RNN's two); timed, where it is cheaper and dearer."""
    if not len(g):
        return []
    med = g.groupby("step").median(numeric_only=True).sort_index()
    time = med["conv_s"] / med["recurrent_s"]
    counted = med["conv_flops"] / med["recurrent_flops"]
    cheaper = [int(k) for k in time.index if time[k] < 1]
    dearer = [int(k) for k in time.index if time[k] >= 1]
    said = ("cheaper than the recurrent layer at every k measured" if not dearer else
            "dearer than the recurrent layer at every k measured" if not cheaper else
            f"cheaper than the recurrent layer at k = {', '.join(map(str, cheaper))} and dearer at k = "
            f"{', '.join(map(str, dearer))}")
    return [f"{row}, the level beside the growth: counted, the convolution's forward costs "
            f"{', '.join(f'{c:.2f}' for c in counted)} times the recurrent layer's at k = "
            f"{', '.join(str(int(k)) for k in counted.index)} ({', '.join(f'{c / k:.2f}' for k, c in counted.items())} "
            "k): its exponent in k is the arithmetic of the layers as the counter sees them, 1 by construction, as "
            "the counted multi-head claim is. In measured time (medians over the seeds) the convolution is "
            f"{said}: the paper's \"more expensive by a factor of k\" is a statement of order, and the timed "
            "exponent is the part a machine decides.", ""]


def plot_conv(hist: pd.DataFrame, rows: list[str], path: Path, title: str) -> Path:
    """Counted forward FLOPs (left) and measured forward + backward time (right) against k, the three layers, the
    median over seeds; one pair of panels a row."""
    fig = Figure(figsize=(10, 4.2 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False)
    for (left, right), row in zip(axes, rows):
        g = hist[hist["row"] == row].groupby("step").median(numeric_only=True).sort_index()
        for ax, keys, unit in ((left, _CONV_KEYS[:3], "forward FLOPs (counted)"),
                               (right, _CONV_KEYS[3:], "forward + backward seconds (measured)")):
            for i, (key, name) in enumerate(zip(keys, ("convolution", "separable convolution", "recurrent"))):
                if key in g:
                    ax.plot(g.index, g[key], marker="osd"[i], color=f"C{i}", label=name)
            ks = [int(k) for k in g.index]
            ax.set(xscale="log", yscale="log", xlabel="kernel width k", ylabel=unit, title=f"{row}: {unit}")
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.xaxis.set_minor_locator(NullLocator())
            plain_log_labels(ax.yaxis)
        handles, labels = right.get_legend_handles_labels()
        right.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(f"{title}: convolutions against recurrence as the kernel widens (§4)", fontsize=10)
    return save_png(fig, path)


# ------------------------------------------------------------------------------------------ the report

def write_statements(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    runs, parent = results["runs"], results["parent"]
    done = runs[runs["status"] == "FINISHED"]
    lines = header_lines(study, results, "the paper's statements in its text, measured", paper_caption=False)
    if not len(done):
        return write_files(study, out_dir, lines + ["No trial finished."], pd.DataFrame(), [])
    threads = pd.to_numeric(done.get("metrics.torch_threads"), errors="coerce").max()
    device = str(done["tags.device"].dropna().iloc[0]) if "tags.device" in done and done["tags.device"].notna().any() \
        else "?"
    repeats = _param(done, row_order(done)[0], "repeats")
    warmup = _param(done, row_order(done)[0], "warmup")
    seeds = sorted(set(done["tags.seed"].astype(int)))
    lines += [f"Timed on {device} with {num(threads, '{:.0f}')} intra-op thread(s), with nothing else running on the "
              f"machine (the long studies paused): each point is the fastest of {repeats} timed blocks after "
              f"{warmup} warm-up call(s) (harness/probes/scaling.py), and each of the {len(seeds)} seeds "
              f"({', '.join(map(str, seeds))}) repeats the whole measurement, so a timed figure's interval is over "
              "those repeats. Counted FLOPs and the float64 fits are the same in every repeat.", ""]
    title = plot_title(study, runs)
    x_lines, x_rec, x_plots = crossover_section(done, uri, out_dir, study, title)
    m_lines, m_rec = multi_head_section(done)
    d_lines, d_rec = dot_additive_section(done, uri)
    o_lines, o_rec, o_plots = offset_section(done, uri, out_dir, study, title)
    c_lines, c_rec, c_plots = conv_section(done, uri, out_dir, study, title)
    sections = x_lines + m_lines + d_lines + o_lines + c_lines
    records = x_rec + m_rec + d_rec + o_rec + c_rec
    plots = x_plots + o_plots + c_plots
    lines += sections
    claims = claims_section(study, runs, uri, parent)
    # each plot stands in its own section, so write_files links none of them again
    return write_files(study, out_dir, lines, pd.DataFrame(records), [], claims) + plots
