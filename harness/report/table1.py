"""Table 1 in the paper's layout: per layer type, the paper's complexity, sequential operations and path
length beside the measured exponents, counts and paths (MLflow -> reports/<study>.md, .csv, PNGs)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness import logged
from harness.paper import load_tables, table1_columns
from harness.probes.scaling_spec import EXPONENT_TOLERANCE, ScalingSpec, exponent_note, fit_exponent
from harness.report.cells import failure_cell, md_table, num
from harness.report.claims_section import claims_section
from harness.report.curves import plot_title, series_style
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
    tags_of,
    text_of,
)

# Table 1: a measured exponent further than this from the paper's is listed under "where they part".
DEVIATION = EXPONENT_TOLERANCE
FITS = ("n_fwd", "n_fwd_bwd", "d_fwd", "d_fwd_bwd")
T1_METRICS = (*(f"exp_{f}" for f in FITS), "seq_ops_measured", "seq_ops_by_construction", "seq_ops_n",
              "aten_ops_at_n", "path_formula_max_n", "path_measured_max_n", "path_max_n", "torch_threads",
              *(f"exp_{f}_points_dropped" for f in FITS), *(f"exp_{f}_fixed_cost_dominated" for f in FITS))
T1_HISTORIES = ("fwd_s_vs_n", "fwd_bwd_s_vs_n", "mem_bytes_vs_n", "fwd_s_vs_d", "fwd_bwd_s_vs_d",
                "path_measured", "path_formula")
T1_PROBE = ("batch", "n_fixed", "d_fixed", "k", "r", "path_k", "path_r", "fixed_mult")


def summarize_table1(runs: pd.DataFrame, declared: list[str], uri: str) -> tuple[pd.DataFrame, dict]:
    """One line per layer: the paper's columns (harness.paper.table1_columns, from tables.yaml) beside the measured ones
    (means over FINISHED seeds), the sweeps' time ratios and memory exponent; and per row the metric
    histories of its first finished trial (or its first trial, for a failed row's partial sweep)."""
    paper_columns = table1_columns()
    records, curves = [], {}
    for row, g, done, status, reason in row_groups(runs, row_order(runs, (), declared)):
        src = (done if len(done) else g).iloc[0]
        layer = text_of(src, "params.probe.layer") or row
        paper = paper_columns.get(layer, {})
        rec = {"row": row, "layer": layer, "status": status, "n_seeds": len(g), "n_finished": len(done),
               "paper_row": paper.get("row", ""), "paper_complexity": paper.get("complexity", ""),
               "paper_exp_n": paper.get("exp_n", NAN), "paper_exp_d": paper.get("exp_d", NAN),
               "paper_seq_ops": paper.get("seq", ""), "paper_path": paper.get("path", "")}
        rec.update({m: mean_of(done, m) for m in T1_METRICS})
        hist = {key: sorted(dict(logged.metric_history(uri, src["run_id"], key)).items()) for key in T1_HISTORIES}
        curves[row] = {"finished": len(done) > 0, **hist}
        for var in ("n", "d"):
            sweep = hist[f"fwd_s_vs_{var}"] or hist[f"fwd_bwd_s_vs_{var}"]
            rec[f"{var}_min"], rec[f"{var}_max"] = (sweep[0][0], sweep[-1][0]) if sweep else (NAN, NAN)
            for p in ("fwd", "fwd_bwd"):
                pts = hist[f"{p}_s_vs_{var}"]
                rec[f"time_ratio_{var}_{p}"] = pts[-1][1] / pts[0][1] if len(pts) > 1 and pts[0][1] > 0 else NAN
        mem = [(n, b) for n, b in hist["mem_bytes_vs_n"] if b > 0]     # a log fit: a zero says nothing
        # The steepest step of the forward n sweep, per unit of log n, and the largest tensor on either side.
        fwd = hist["fwd_s_vs_n"]
        steps = [(math.log(t1 / t0) / math.log(n1 / n0), n0, n1, t1 / t0) for (n0, t0), (n1, t1) in zip(fwd, fwd[1:])
                 if n1 > n0 and t0 > 0 and t1 > 0]
        slope, n0, n1, ratio = max(steps) if steps else (NAN, NAN, NAN, NAN)
        sizes = dict(mem)
        rec.update({"steepest_n_slope": slope, "steepest_n_from": n0, "steepest_n_to": n1, "steepest_n_ratio": ratio,
                    "steepest_mem_from": sizes.get(n0, NAN), "steepest_mem_to": sizes.get(n1, NAN),
                    "other_n_slopes": ", ".join(f"{s_:.2f}" for s_, *_ in steps if s_ != slope)})
        rec["fwd_s_at_max_n"] = fwd[-1][1] if fwd else NAN
        rec["mem_exp_n"] = fit_exponent(*zip(*mem), fixed_mult=0)["slope"] if len(mem) > 1 else NAN
        rec["mem_bytes_at_max_n"] = mem[-1][1] if mem else NAN
        rec["device"] = tags_of(done, "device") or text_of(src, "params.probe.device")
        rec.update({k: param_of(src, f"probe.{k}") for k in T1_PROBE})
        if pd.isna(rec["fixed_mult"]):
            rec["fixed_mult"] = ScalingSpec.fixed_mult
        rec["failure_reason"] = reason
        records.append(rec)
    return pd.DataFrame.from_records(records), curves


def table1_notes(table: pd.DataFrame) -> list[str]:
    """Where measurement and theory part, generated from this run's numbers."""
    notes, by = [], {r["row"]: r for r in table.to_dict("records")}
    ok = {r["layer"]: r for r in by.values() if r["n_finished"]}
    for r in by.values():
        if not r["n_finished"]:
            notes.append(f"`{r['row']}`: {failure_cell(r)}; no measurement, the row's measured columns are empty.")
            continue
        for var in ("n", "d"):
            lo, hi = r[f"{var}_min"], r[f"{var}_max"]
            for p, label in (("fwd", "forward"), ("fwd_bwd", "forward + backward")):
                note = exponent_note(r["row"], var, label, r[f"exp_{var}_{p}"], r[f"paper_exp_{var}"],
                                     (lo, hi) if pd.notna(lo) else None, r[f"time_ratio_{var}_{p}"],
                                     r[f"exp_{var}_{p}_points_dropped"],
                                     r[f"exp_{var}_{p}_fixed_cost_dominated"] >= 0.5, r["fixed_mult"])
                if note:
                    notes.append(note)
        slope = r.get("steepest_n_slope", NAN)
        if r["layer"] not in ("plain", "window_model") and pd.notna(slope) and pd.notna(r["exp_n_fwd"]) \
                and r["exp_n_fwd"] - r["paper_exp_n"] > DEVIATION and slope - r["paper_exp_n"] > 2 * DEVIATION:
            mem = (f", while its largest forward tensor grows from {r['steepest_mem_from'] / 2 ** 20:.1f} to "
                   f"{r['steepest_mem_to'] / 2 ** 20:.1f} MiB: the working set outgrows the processor's caches "
                   "there, and each element then costs a trip to main memory" if pd.notna(r["steepest_mem_to"]) else "")
            notes.append(f"`{r['row']}`: the excess sits in one step of the sweep: from n = {r['steepest_n_from']:g} "
                         "to "
                         f"{r['steepest_n_to']:g} time grows {r['steepest_n_ratio']:.1f}x (local exponent {slope:.2f}; "
                         f"the other steps: {r['other_n_slopes']}){mem}. The operation count is linear in n; the "
                         "memory hierarchy is not part of the paper's model.")
    if "plain" in ok:
        r = ok["plain"]
        shape = "superlinear" if r["exp_n_fwd"] > 1 else "at most linear"
        text = (f"`plain` builds the n x n score matrix: its time is {shape} in n, exponent "
                f"{num(r['exp_n_fwd'])} forward and {num(r['exp_n_fwd_bwd'])} forward + backward "
                f"(paper {r['paper_exp_n']:g})")
        if pd.notna(r["mem_bytes_at_max_n"]):
            text += (f"; its largest forward tensor grows as n^{num(r['mem_exp_n'])} and is "
                     f"{r['mem_bytes_at_max_n'] / 2 ** 20:.1f} MiB at n = {r['n_max']:g} (batch "
                     f"{num(r['batch'], '{:g}')} x n x n scores)")
        text += ". Softmax streams that matrix through memory, so the n^2 term is paid in bytes as much as in flops"
        if "sdpa" in ok:
            s = ok["sdpa"]
            text += f"; the fused `sdpa` kernel, which never stores it, fits {num(s['exp_n_fwd'])}"
            if pd.notna(s["mem_bytes_at_max_n"]):
                text += f" with a largest tensor of {s['mem_bytes_at_max_n'] / 2 ** 20:.2f} MiB"
        notes.append(text + ".")
    for r in ok.values():
        seq, built = r["seq_ops_measured"], r["seq_ops_by_construction"]
        if r["layer"] == "rnn_torch" and pd.notna(seq) and pd.notna(built) and abs(seq - built) > 0.5:
            loop = ok.get("rnn_loop")
            notes.append(f"`{r['row']}`: {built:g} sequential steps by construction at n = {r['seq_ops_n']:g}, but "
                         f"the dispatcher sees {num(r['aten_ops_at_n'], '{:.0f}')} aten op(s) in all and counts "
                         f"{seq:g} sequential op(s): nn.RNN's n-step loop runs inside one library kernel, hidden "
                         "from op counting" + (f" (`rnn_loop`, the same recurrence in Python: "
                                               f"{num(loop['seq_ops_measured'], '{:g}')})" if loop else "") + ".")
    if "conv_dilated" in ok and "conv" in ok:
        d, c = ok["conv_dilated"], ok["conv"]
        if pd.notna(d["path_measured_max_n"]) and pd.notna(c["path_measured_max_n"]):
            notes.append(f"`conv_dilated` connects input 0 to output n-1 through {d['path_measured_max_n']:g} stacked "
                         f"layers at n = {d['path_max_n']:g} (formula ceil(log_k n) = {d['path_formula_max_n']:g}, "
                         f"k = {num(d['path_k'], '{:g}')}), contiguous `conv` through {c['path_measured_max_n']:g} "
                         f"at n = {c['path_max_n']:g} (ceil((n-1)/(k-1)) = {c['path_formula_max_n']:g}): the paper's "
                         f"{d['paper_path']} is the dilated stack's, {c['paper_path']} the contiguous one's.")
    notes += _model_notes(ok)
    for r in ok.values():
        m, f = r["path_measured_max_n"], r["path_formula_max_n"]
        if pd.notna(m) and pd.notna(f) and m != f:
            notes.append(f"`{r['row']}`: measured path length {m:g} differs from the formula's {f:g} at "
                         f"n = {r['path_max_n']:g}.")
    return notes or [f"Every fitted exponent is within {DEVIATION} of the paper's and every path length matches "
                     "its formula."]


def _model_notes(ok: dict) -> list[str]:
    """The model's own layers (harness/probes/scaling.py ModelSelfAttention, ModelDecodeStep) beside the probe's:
    what a model with `attention_window` pays in training and in decoding."""
    notes = []
    if any(k in ok for k in ("window_model", "decode_full", "decode_window")):
        notes.append("The model's layers (`window_model`, `decode_full`, `decode_window`) include the Q, K, V and "
                     "output projections, which the paper's complexity column leaves out: 4 n d^2 multiply-adds over "
                     "n positions, 4 d^2 for a decoding step's one position. They add a d^2 term to the attention's "
                     "d, so the exponent in d may sit above the paper's 1.")
    if "window_model" in ok:
        w, rr = ok["window_model"], ok.get("restricted")
        text = (f"`{w['row']}`, the model's self-attention with `attention_window` = r/2 on either side (the "
                f"{num(w['r'], '{:g}')} + 1 keys `restricted` sees): exponent in n {num(w['exp_n_fwd'])} forward and "
                f"{num(w['exp_n_fwd_bwd'])} forward + backward")
        if rr is not None:
            text += f", against {num(rr['exp_n_fwd'])} for `restricted`'s unfolded window"
            if pd.notna(w["fwd_s_at_max_n"]) and pd.notna(rr["fwd_s_at_max_n"]):
                text += (f" ({w['fwd_s_at_max_n'] * 1e3:.2f} against {rr['fwd_s_at_max_n'] * 1e3:.2f} ms forward at "
                         f"n = {w['n_max']:g})")
        notes.append(text + ". The model applies its window as a mask over the n x n scores (model/kernels.py "
                     "window_mask), so a model trained with a window pays full attention's O(n^2 d), not the "
                     "paper's O(r n d); what the window saves it saves in decoding.")
    if "decode_full" in ok and "decode_window" in ok:
        f, w = ok["decode_full"], ok["decode_window"]
        text = (f"One cached decoding step at position n: with the full cache (n + 1 keys) its time grows as "
                f"n^{num(f['exp_n_fwd'])}, with the window's ring of r + 1 keys as n^{num(w['exp_n_fwd'])}")
        if pd.notna(f["fwd_s_at_max_n"]) and pd.notna(w["fwd_s_at_max_n"]):
            text += (f"; at n = {f['n_max']:g}, {f['fwd_s_at_max_n'] * 1e3:.3f} against "
                     f"{w['fwd_s_at_max_n'] * 1e3:.3f} ms a step")
        notes.append(text + ". The ring's cache also stays r + 1 keys a layer however long the output.")
    return notes


def _exp_cell(r: dict, fit: str) -> str:
    return num(r[f"exp_{fit}"]) + ("†" if r[f"exp_{fit}_fixed_cost_dominated"] >= 0.5 else "")


def render_table1(study: str, results: dict, table: pd.DataFrame) -> list[str]:
    lines = header_lines(study, results, load_tables()["table1"]["caption"])
    done = results["runs"][results["runs"]["status"] == "FINISHED"]
    first = (done if len(done) else results["runs"]).iloc[0]

    def p(key: str) -> str:
        return text_of(first, f"params.probe.{key}") or "?"
    lines += ["The paper's columns (complexity, the exponents of n and d it implies, sequential operations, "
              "maximum path length) come from harness/paper/tables.yaml (Table 1, and the §4 text for the "
              "separable and contiguous convolutions); the measured ones from each layer's trial "
              "(harness/probes/scaling.py).", "",
              f"Measured on {tags_of(done, 'device') or p('device')} with "
              f"{num(column(done, 'metrics.torch_threads').max(), '{:.0f}')} thread(s), batch {p('batch')}: "
              f"n in {p('ns')} at d = {p('d_fixed')}, d in {p('ds')} at n = {p('n_fixed')}; k = {p('k')}, "
              f"r = {p('r')}; path lengths with k = {p('path_k')}, r = {p('path_r')} at n in {p('path_ns')}.", "",
              "Exponents are least-squares slopes of log time against log n (at fixed d) and log d (at fixed n) "
              "after the points within the fixed-cost multiple of a sweep's smallest time are dropped; † marks a "
              "fit where fixed costs dominate (fewer than 3 points left; the 3 largest were fitted). Sequential "
              "ops: dependent steps counted from aten ops at n = the largest swept n. Path: fewest stacked layers "
              "(recurrent steps for the RNNs) through which output n-1 depends on input 0, at the largest probed "
              "n; formula = the closed form at that n.", ""]
    head = ["layer", "paper row", "complexity", "n: paper", "n: fwd", "n: fwd+bwd", "d: paper", "d: fwd",
            "d: fwd+bwd", "seq. ops: paper", "seq. ops: measured", "path: paper", "path: formula", "path: measured",
            "notes"]
    body = []
    for r in table.to_dict("records"):
        seq_at = f" (n={r['seq_ops_n']:g})" if pd.notna(r["seq_ops_n"]) else ""
        path_at = f" (n={r['path_max_n']:g})" if pd.notna(r["path_max_n"]) else ""
        body.append([f"**{r['row']}**" + (f" ({r['layer']})" if r["layer"] != r["row"] else ""),
                     r["paper_row"] or "–", r["paper_complexity"] or "–", num(r["paper_exp_n"], "{:g}"),
                     _exp_cell(r, "n_fwd"), _exp_cell(r, "n_fwd_bwd"), num(r["paper_exp_d"], "{:g}"),
                     _exp_cell(r, "d_fwd"), _exp_cell(r, "d_fwd_bwd"), r["paper_seq_ops"] or "–",
                     num(round(r["seq_ops_measured"], 2), "{:g}") + seq_at, r["paper_path"] or "–",
                     num(r["path_formula_max_n"], "{:g}"), num(r["path_measured_max_n"], "{:g}") + path_at,
                     failure_cell(r)])
    lines += md_table(head, body)
    lines += ["", "## Where measurement and theory part", "", *(f"- {n}" for n in table1_notes(table))]
    return lines


def plot_table1_time(title: str, table: pd.DataFrame, curves: dict, var: str, path: Path) -> Path | None:
    """Log-log time against n (or d) per layer: markers and the row's line style forward, dashed forward + backward
    (none for a decoding step), slopes in the legend, which sits outside the axes."""
    fig = Figure(figsize=(10.5, 5.5), layout="constrained")
    ax = fig.add_subplot()
    for i, r in enumerate(table.to_dict("records")):
        c, style = curves.get(r["row"], {}), series_style(i)
        fwd, both = c.get(f"fwd_s_vs_{var}", []), c.get(f"fwd_bwd_s_vs_{var}", [])
        label = (f"{r['row']} (slope {num(r[f'exp_{var}_fwd'])} / {num(r[f'exp_{var}_fwd_bwd'])}; "
                 f"paper {num(r[f'paper_exp_{var}'], '{:g}')})" + ("" if c.get("finished") else f" {r['status']}"))
        if fwd:
            ax.plot(*zip(*fwd), color=style["color"], ls=style["ls"], marker=style["marker"], ms=3, lw=1.2,
                    label=label)
        if both:
            ax.plot(*zip(*both), "--", color=style["color"], lw=1, alpha=0.8, label=None if fwd else label)
    if ax.get_legend_handles_labels()[0]:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=7,
                   title="slope fwd / fwd+bwd", title_fontsize=7)
    else:
        return None                    # nothing timed: a plot would carry no information
    fixed = "d" if var == "n" else "n"
    at = table[f"{fixed}_fixed"].dropna()
    ax.set(xlabel="sequence length n" if var == "n" else "width d",
           ylabel="seconds per call (fwd; dashed fwd+bwd)",
           title=f"{title}: time against {var}" + (f" at {fixed} = {at.iloc[0]:g}" if len(at) else ""))
    return save_png(fig, path)


def plot_table1_paths(title: str, table: pd.DataFrame, curves: dict, path: Path) -> Path | None:
    """Measured maximum path length (solid, o) against the formula (dashed, x), against n: one small panel a row,
    on shared axes. On one axes eleven rows' two lines each lay on top of each other (most paths are 1, or the
    same few layers), and rows ten apart shared a colour and the formula's style."""
    drawn = [(r, curves.get(r["row"], {})) for r in table.to_dict("records")]
    drawn = [(r, c) for r, c in drawn if c.get("path_measured") or c.get("path_formula")]
    if not drawn:
        return None                    # nothing measured: a plot would carry no information
    cols = min(4, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.4 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax, (r, c) in zip(axes, drawn):
        if c.get("path_measured"):
            ax.plot(*zip(*c["path_measured"]), "o-", color="C0", lw=1.2, ms=4, label="measured")
        if c.get("path_formula"):
            ax.plot(*zip(*c["path_formula"]), "x--", color="C1", lw=1, ms=6, label="formula")
        ax.set_title(f"{r['row']}: {r['paper_path'] or '?'}", fontsize=8)
        ax.tick_params(labelsize=7)
    legend = {label: h for ax in axes for h, label in zip(*ax.get_legend_handles_labels())}
    for ax in axes[len(drawn):]:
        ax.set_axis_off()
    if len(drawn) < len(axes):         # in the grid's first empty cell (a figure legend runs into the title)
        axes[len(drawn)].legend(list(legend.values()), list(legend), loc="center", fontsize=8)
    else:
        fig.legend(list(legend.values()), list(legend), loc="outside right upper", fontsize=8)
    fig.supxlabel("sequence length n", fontsize=9)
    fig.supylabel("maximum path length (layers; RNN: steps)", fontsize=9)
    fig.suptitle(f"{title}: path from input 0 to output n-1, measured vs the paper's formula", fontsize=10)
    return save_png(fig, path)


def write_table1(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    table, curves = summarize_table1(results["runs"], declared_rows(results["parent"]), uri)
    title = plot_title(study, results["runs"])
    plots = [plot_table1_time(title, table, curves, "n", out_dir / f"{study}_time_vs_n.png"),
             plot_table1_time(title, table, curves, "d", out_dir / f"{study}_time_vs_d.png"),
             plot_table1_paths(title, table, curves, out_dir / f"{study}_path_length.png")]
    return write_files(study, out_dir, render_table1(study, results, table), table, plots,
                  claims_section(study, results["runs"], uri, results["parent"]))
