"""Tables 1, 2 and 4 in the paper's layouts: MLflow -> reports/<study>.md, .csv and PNG plots.

harness/report.py reads the latest invocation of a study, writes the header every report shares and the
README index, and renders Table 3 (and any study without a table of its own). write_report hands a study
whose paper table (the parent's `table` tag) is table1, table2 or table4 to WRITERS here. The paper's values
come from harness/paper/tables.yaml only (directly, or through harness.probes.scaling.PAPER and
harness.probes.cost.training_costs, which read it). Failed trials stay in every table as FAILED rows with
their failure reason; absent values print as "–".
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from . import tracking
from .paper import load_tables
from .report import (_atomic_write, _col, _num, _pm, _save, claims_section, declared_rows, header_lines,
                     plot_learning_curves, row_groups, row_order, synthetic_data)

NAN = float("nan")
# Table 1: a measured exponent further than this from the paper's is listed under "where they part".
DEVIATION = 0.2
FITS = ("n_fwd", "n_fwd_bwd", "d_fwd", "d_fwd_bwd")
T1_METRICS = (*(f"exp_{f}" for f in FITS), "seq_ops_measured", "seq_ops_by_construction", "seq_ops_n",
              "aten_ops_at_n", "path_formula_max_n", "path_measured_max_n", "path_max_n", "torch_threads",
              *(f"exp_{f}_points_dropped" for f in FITS), *(f"exp_{f}_fixed_cost_dominated" for f in FITS))
T1_HISTORIES = ("fwd_s_vs_n", "fwd_bwd_s_vs_n", "mem_bytes_vs_n", "fwd_s_vs_d", "fwd_bwd_s_vs_d",
                "path_measured", "path_formula")
T1_PROBE = ("batch", "n_fixed", "d_fixed", "k", "r", "path_k", "path_r", "fixed_mult")
# Table 2: our study rows -> the paper's row names (tables.yaml table2.rows / table2.training).
T2_ROWS = {"base": "Transformer (base model)", "big": "Transformer (big)"}
T2_ARCH = {"N": "model.n_layers", "d_model": "model.d_model", "d_ff": "model.d_ff", "h": "model.n_heads",
           "P_drop": "model.p_drop", "average_last": "train.average_last"}
T4_SETUP = {"train_trees": "data.train_pairs", "N": "model.n_layers", "d_model": "model.d_model",
            "beam": "train.beam_size", "alpha": "train.alpha", "max_extra": "train.max_extra"}
T4_SCORES = ("f1", "recall", "precision", "complete_match", "average_crossing", "well_formed", "parsed_sentences")


# ------------------------------------------------------------------------------------------ shared bits

def _text(run: pd.Series, key: str) -> str:
    """A tag or param as text; "" when absent."""
    v = run.get(key)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _param(run: pd.Series, key: str) -> float:
    """A param as a number (params are strings in MLflow); NaN when absent or not a number."""
    v = run.get(f"params.{key}")
    return NAN if v is None else float(pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0])


def _mean(done: pd.DataFrame, metric: str) -> float:
    return _col(done, f"metrics.{metric}").mean()


def _std(done: pd.DataFrame, metric: str) -> float:
    return _col(done, f"metrics.{metric}").std()   # NaN for one seed


def _tags(g: pd.DataFrame, key: str) -> str:
    return ", ".join(dict.fromkeys(g[f"tags.{key}"].dropna().astype(str))) if f"tags.{key}" in g else ""


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _md_table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)]


def _seeds(r: dict) -> str:
    return f"{r['n_finished']}/{r['n_seeds']}" + ("" if r["status"] == "FINISHED" else f" {r['status']}")


def _failure(r: dict) -> str:
    return f"{r['status']}: {r['failure_reason']}" if r["failure_reason"] else \
        ("" if r["status"] == "FINISHED" else r["status"])


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} logged", transform=ax.transAxes, ha="center", va="center", color="gray")


def _write(study: str, out_dir: Path, lines: list[str], table: pd.DataFrame, plots: list[Path],
           claims: list[str] = ()) -> list[Path]:
    lines = [*lines, "", *(f"![{p.stem}]({p.name})" for p in plots), "", *claims]
    csv = _atomic_write(out_dir / f"{study}.csv", table.to_csv(index=False, float_format="%.6g"))
    md = _atomic_write(out_dir / f"{study}.md", "\n".join(lines))
    return [md, csv, *plots]


# ------------------------------------------------------------------------------------------ Table 1

def summarize_table1(runs: pd.DataFrame, declared: list[str], uri: str) -> tuple[pd.DataFrame, dict]:
    """One line per layer: the paper's columns (scaling.PAPER, from tables.yaml) beside the measured ones
    (means over FINISHED seeds), the sweeps' time ratios and memory exponent; and per row the metric
    histories of its first finished trial (or its first trial, for a failed row's partial sweep)."""
    from .probes.scaling import PAPER, ScalingSpec, fit_exponent
    records, curves = [], {}
    for row, g, done, status, reason in row_groups(runs, row_order(runs, (), declared)):
        src = (done if len(done) else g).iloc[0]
        layer = _text(src, "params.probe.layer") or row
        paper = PAPER.get(layer, {})
        rec = {"row": row, "layer": layer, "status": status, "n_seeds": len(g), "n_finished": len(done),
               "paper_row": paper.get("row", ""), "paper_complexity": paper.get("complexity", ""),
               "paper_exp_n": paper.get("exp_n", NAN), "paper_exp_d": paper.get("exp_d", NAN),
               "paper_seq_ops": paper.get("seq", ""), "paper_path": paper.get("path", "")}
        rec.update({m: _mean(done, m) for m in T1_METRICS})
        hist = {key: sorted(dict(tracking.metric_history(uri, src["run_id"], key)).items()) for key in T1_HISTORIES}
        curves[row] = {"finished": len(done) > 0, **hist}
        for var in ("n", "d"):
            sweep = hist[f"fwd_s_vs_{var}"] or hist[f"fwd_bwd_s_vs_{var}"]
            rec[f"{var}_min"], rec[f"{var}_max"] = (sweep[0][0], sweep[-1][0]) if sweep else (NAN, NAN)
            for p in ("fwd", "fwd_bwd"):
                pts = hist[f"{p}_s_vs_{var}"]
                rec[f"time_ratio_{var}_{p}"] = pts[-1][1] / pts[0][1] if len(pts) > 1 and pts[0][1] > 0 else NAN
        mem = hist["mem_bytes_vs_n"]
        # The steepest step of the forward n sweep, per unit of log n, and the largest tensor on either side.
        fwd = hist["fwd_s_vs_n"]
        steps = [(math.log(t1 / t0) / math.log(n1 / n0), n0, n1, t1 / t0) for (n0, t0), (n1, t1) in zip(fwd, fwd[1:])
                 if n1 > n0 and t0 > 0 and t1 > 0]
        slope, n0, n1, ratio = max(steps) if steps else (NAN, NAN, NAN, NAN)
        sizes = dict(mem)
        rec.update({"steepest_n_slope": slope, "steepest_n_from": n0, "steepest_n_to": n1, "steepest_n_ratio": ratio,
                    "steepest_mem_from": sizes.get(n0, NAN), "steepest_mem_to": sizes.get(n1, NAN),
                    "other_n_slopes": ", ".join(f"{s_:.2f}" for s_, *_ in steps if s_ != slope)})
        rec["mem_exp_n"] = fit_exponent(*zip(*mem), fixed_mult=0)["slope"] if len(mem) > 1 else NAN
        rec["mem_bytes_at_max_n"] = mem[-1][1] if mem else NAN
        rec["device"] = _tags(done, "device") or _text(src, "params.probe.device")
        rec.update({k: _param(src, f"probe.{k}") for k in T1_PROBE})
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
            notes.append(f"`{r['row']}`: {_failure(r)}; no measurement, the row's measured columns are empty.")
            continue
        for var in ("n", "d"):
            want = r[f"paper_exp_{var}"]
            for p, label in (("fwd", "forward"), ("fwd_bwd", "forward + backward")):
                got = r[f"exp_{var}_{p}"]
                if pd.isna(got) or pd.isna(want) or abs(got - want) <= DEVIATION:
                    continue
                lo, hi = r[f"{var}_min"], r[f"{var}_max"]
                dropped, dominated = r[f"exp_{var}_{p}_points_dropped"], r[f"exp_{var}_{p}_fixed_cost_dominated"]
                why = (f"fixed costs dominate (fixed_cost_dominated): fewer than 3 points reached "
                       f"{r['fixed_mult']:g}x the sweep's smallest time, so the 3 largest were fitted"
                       if dominated >= 0.5 else f"{dropped:.0f} smallest point(s) dropped as fixed-cost"
                       if dropped > 0 else "no point dropped as fixed-cost")
                sweep = (f"time grew {_num(r[f'time_ratio_{var}_{p}'], '{:.1f}')}x over {var} = {lo:g}..{hi:g}, "
                         f"where {var}^{want:g} predicts {(hi / lo) ** want:.0f}x") if pd.notna(lo) and lo > 0 \
                    else "no sweep logged"
                notes.append(f"`{r['row']}`: exponent in {var} ({label}) {got:.2f} against the paper's {want:g} "
                             f"({got - want:+.2f}); {sweep}; {why}.")
        slope = r.get("steepest_n_slope", NAN)
        if r["layer"] != "plain" and pd.notna(slope) and pd.notna(r["exp_n_fwd"]) \
                and r["exp_n_fwd"] - r["paper_exp_n"] > DEVIATION and slope - r["paper_exp_n"] > 2 * DEVIATION:
            mem = (f", while its largest forward tensor grows from {r['steepest_mem_from'] / 2 ** 20:.1f} to "
                   f"{r['steepest_mem_to'] / 2 ** 20:.1f} MiB: the working set outgrows the processor's caches "
                   "there, and each element then costs a trip to main memory" if pd.notna(r["steepest_mem_to"]) else "")
            notes.append(f"`{r['row']}`: the excess sits in one step of the sweep: from n = {r['steepest_n_from']:g} to "
                         f"{r['steepest_n_to']:g} time grows {r['steepest_n_ratio']:.1f}x (local exponent {slope:.2f}; "
                         f"the other steps: {r['other_n_slopes']}){mem}. The operation count is linear in n; the "
                         "memory hierarchy is not part of the paper's model.")
    if "plain" in ok:
        r = ok["plain"]
        shape = "superlinear" if r["exp_n_fwd"] > 1 else "at most linear"
        text = (f"`plain` builds the n x n score matrix: its time is {shape} in n, exponent "
                f"{_num(r['exp_n_fwd'])} forward and {_num(r['exp_n_fwd_bwd'])} forward + backward "
                f"(paper {r['paper_exp_n']:g})")
        if pd.notna(r["mem_bytes_at_max_n"]):
            text += (f"; its largest forward tensor grows as n^{_num(r['mem_exp_n'])} and is "
                     f"{r['mem_bytes_at_max_n'] / 2 ** 20:.1f} MiB at n = {r['n_max']:g} (batch "
                     f"{_num(r['batch'], '{:g}')} x n x n scores)")
        text += ". Softmax streams that matrix through memory, so the n^2 term is paid in bytes as much as in flops"
        if "sdpa" in ok:
            s = ok["sdpa"]
            text += f"; the fused `sdpa` kernel, which never stores it, fits {_num(s['exp_n_fwd'])}"
            if pd.notna(s["mem_bytes_at_max_n"]):
                text += f" with a largest tensor of {s['mem_bytes_at_max_n'] / 2 ** 20:.2f} MiB"
        notes.append(text + ".")
    for r in ok.values():
        seq, built = r["seq_ops_measured"], r["seq_ops_by_construction"]
        if r["layer"] == "rnn_torch" and pd.notna(seq) and pd.notna(built) and abs(seq - built) > 0.5:
            loop = ok.get("rnn_loop")
            notes.append(f"`{r['row']}`: {built:g} sequential steps by construction at n = {r['seq_ops_n']:g}, but "
                         f"the dispatcher sees {_num(r['aten_ops_at_n'], '{:.0f}')} aten op(s) in all and counts "
                         f"{seq:g} sequential op(s): nn.RNN's n-step loop runs inside one library kernel, hidden "
                         "from op counting" + (f" (`rnn_loop`, the same recurrence in Python: "
                                               f"{_num(loop['seq_ops_measured'], '{:g}')})" if loop else "") + ".")
    if "conv_dilated" in ok and "conv" in ok:
        d, c = ok["conv_dilated"], ok["conv"]
        if pd.notna(d["path_measured_max_n"]) and pd.notna(c["path_measured_max_n"]):
            notes.append(f"`conv_dilated` connects input 0 to output n-1 through {d['path_measured_max_n']:g} stacked "
                         f"layers at n = {d['path_max_n']:g} (formula ceil(log_k n) = {d['path_formula_max_n']:g}, "
                         f"k = {_num(d['path_k'], '{:g}')}), contiguous `conv` through {c['path_measured_max_n']:g} "
                         f"at n = {c['path_max_n']:g} (ceil((n-1)/(k-1)) = {c['path_formula_max_n']:g}): the paper's "
                         f"{d['paper_path']} is the dilated stack's, {c['paper_path']} the contiguous one's.")
    for r in ok.values():
        m, f = r["path_measured_max_n"], r["path_formula_max_n"]
        if pd.notna(m) and pd.notna(f) and m != f:
            notes.append(f"`{r['row']}`: measured path length {m:g} differs from the formula's {f:g} at "
                         f"n = {r['path_max_n']:g}.")
    return notes or [f"Every fitted exponent is within {DEVIATION} of the paper's and every path length matches "
                     "its formula."]


def _exp_cell(r: dict, fit: str) -> str:
    return _num(r[f"exp_{fit}"]) + ("†" if r[f"exp_{fit}_fixed_cost_dominated"] >= 0.5 else "")


def render_table1(study: str, results: dict, table: pd.DataFrame) -> list[str]:
    lines = header_lines(study, results, load_tables()["table1"]["caption"])
    done = results["runs"][results["runs"]["status"] == "FINISHED"]
    first = (done if len(done) else results["runs"]).iloc[0]

    def p(key: str) -> str:
        return _text(first, f"params.probe.{key}") or "?"
    lines += ["The paper's columns (complexity, the exponents of n and d it implies, sequential operations, "
              "maximum path length) come from harness/paper/tables.yaml (Table 1, and the §4 text for the "
              "separable and contiguous convolutions); the measured ones from each layer's trial "
              "(harness/probes/scaling.py).", "",
              f"Measured on {_tags(done, 'device') or p('device')} with "
              f"{_num(_col(done, 'metrics.torch_threads').max(), '{:.0f}')} thread(s), batch {p('batch')}: "
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
                     r["paper_row"] or "–", r["paper_complexity"] or "–", _num(r["paper_exp_n"], "{:g}"),
                     _exp_cell(r, "n_fwd"), _exp_cell(r, "n_fwd_bwd"), _num(r["paper_exp_d"], "{:g}"),
                     _exp_cell(r, "d_fwd"), _exp_cell(r, "d_fwd_bwd"), r["paper_seq_ops"] or "–",
                     _num(round(r["seq_ops_measured"], 2), "{:g}") + seq_at, r["paper_path"] or "–",
                     _num(r["path_formula_max_n"], "{:g}"), _num(r["path_measured_max_n"], "{:g}") + path_at,
                     _failure(r)])
    lines += _md_table(head, body)
    lines += ["", "## Where measurement and theory part", "", *(f"- {n}" for n in table1_notes(table))]
    return lines


def plot_table1_time(study: str, table: pd.DataFrame, curves: dict, var: str, path: Path) -> Path:
    """Log-log time against n (or d) per layer: solid forward, dashed forward + backward, slopes in the legend."""
    fig = Figure(figsize=(8, 5.5))
    ax = fig.add_subplot()
    for i, r in enumerate(table.to_dict("records")):
        c = curves.get(r["row"], {})
        fwd, both = c.get(f"fwd_s_vs_{var}", []), c.get(f"fwd_bwd_s_vs_{var}", [])
        label = (f"{r['row']} (slope {_num(r[f'exp_{var}_fwd'])} / {_num(r[f'exp_{var}_fwd_bwd'])}; "
                 f"paper {_num(r[f'paper_exp_{var}'], '{:g}')})" + ("" if c.get("finished") else f" {r['status']}"))
        color = f"C{i % 10}"
        if fwd:
            ax.plot(*zip(*fwd), "o-", color=color, ms=3, lw=1.2, label=label)
        if both:
            ax.plot(*zip(*both), "--", color=color, lw=1, alpha=0.8, label=None if fwd else label)
    if ax.get_legend_handles_labels()[0]:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7, title="slope fwd / fwd+bwd", title_fontsize=7)
    else:
        _no_data(ax, "timings")
    fixed = "d" if var == "n" else "n"
    at = table[f"{fixed}_fixed"].dropna()
    ax.set(xlabel="sequence length n" if var == "n" else "width d",
           ylabel="seconds per call (solid fwd, dashed fwd+bwd)",
           title=f"{study}: time against {var}" + (f" at {fixed} = {at.iloc[0]:g}" if len(at) else ""))
    return _save(fig, path)


def plot_table1_paths(study: str, table: pd.DataFrame, curves: dict, path: Path) -> Path:
    """Measured maximum path length (solid) against the formula (dashed) per layer, against n."""
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    for i, r in enumerate(table.to_dict("records")):
        c, color = curves.get(r["row"], {}), f"C{i % 10}"
        if c.get("path_measured"):
            ax.plot(*zip(*c["path_measured"]), "o-", color=color, lw=1.2, label=f"{r['row']} measured")
        if c.get("path_formula"):
            ax.plot(*zip(*c["path_formula"]), "x--", color=color, lw=1, alpha=0.7,
                    label=f"{r['row']} formula ({r['paper_path'] or '?'})")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    else:
        _no_data(ax, "path lengths")
    ax.set(xlabel="sequence length n", ylabel="maximum path length (layers; RNN: steps)",
           title=f"{study}: path from input 0 to output n-1, measured vs formula")
    return _save(fig, path)


def write_table1(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    table, curves = summarize_table1(results["runs"], declared_rows(results["parent"]), uri)
    plots = [plot_table1_time(study, table, curves, "n", out_dir / f"{study}_time_vs_n.png"),
             plot_table1_time(study, table, curves, "d", out_dir / f"{study}_time_vs_d.png"),
             plot_table1_paths(study, table, curves, out_dir / f"{study}_path_length.png")]
    return _write(study, out_dir, render_table1(study, results, table), table, plots,
                  claims_section(study, results["runs"], uri))


# ------------------------------------------------------------------------------------------ Table 2

def summarize_table2(runs: pd.DataFrame, declared: list[str]) -> pd.DataFrame:
    """One line per row: test/dev BLEU (mean and std over FINISHED seeds), PPL, size, time, and the cost two
    ways (the paper's: seconds x 1 device x this device's matmul rate; counted: train_flops), with the
    paper's EN-DE BLEU and cost beside."""
    paper = load_tables()["table2"]["rows"]
    runs = runs.assign(cost_paper_way=_col(runs, "metrics.train_seconds")
                       * _col(runs, "metrics.device_matmul_tflops") * 1e12,
                       cost_counted=_col(runs, "metrics.train_flops"))
    runs["implied_utilization"] = runs["cost_counted"] / runs["cost_paper_way"]
    records = []
    for row, g, done, status, reason in row_groups(runs, row_order(runs, list(T2_ROWS), declared)):
        src = (done if len(done) else g).iloc[0]
        name = T2_ROWS.get(row, "")
        rec = {"row": row, "paper_model": name, "status": status, "n_seeds": len(g), "n_finished": len(done),
               "data": _text(src, "params.data.name"), **{c: _param(src, k) for c, k in T2_ARCH.items()}}
        for m in ("test_bleu", "test_bleu_tok", "dev_bleu", "dev_bleu_tok", "test_bleu_tok_last", "test_ppl_last"):
            rec[f"{m}_mean"], rec[f"{m}_std"] = _mean(done, m), _std(done, m)
        # What averaging the last checkpoints bought over the last checkpoint alone, seed by seed.
        rec["averaging_gain_bleu_tok"] = (_col(done, "metrics.test_bleu_tok")
                                          - _col(done, "metrics.test_bleu_tok_last")).mean()
        rec.update({m: _mean(done, m) for m in ("dev_ppl", "test_ppl", "steps", "averaged_checkpoints",
                                                "train_seconds", "eval_seconds", "tokens_seen",
                                                "flops_per_target_token", "device_matmul_tflops")})
        rec["params_M"] = _mean(done, "params") / 1e6
        rec["train_minutes"] = rec["train_seconds"] / 60
        rec.update({c: done[c].mean() for c in ("cost_paper_way", "cost_counted", "implied_utilization")})
        rec["device"] = _tags(done, "device")
        theirs = paper.get(name, {})
        rec.update({f"paper_{k}": theirs.get(k, NAN) for k in ("bleu_en_de", "bleu_en_fr", "cost_en_de")})
        rec["failure_reason"] = reason
        records.append(rec)
    return pd.DataFrame.from_records(records).astype({f"paper_{k}": float for k in
                                                      ("bleu_en_de", "bleu_en_fr", "cost_en_de")})


def render_table2(study: str, results: dict, table: pd.DataFrame, costs: list[dict]) -> list[str]:
    t2 = load_tables()["table2"]
    lines = header_lines(study, results, t2["caption"])
    m = t2.get("metrics", {})
    lines += ["The paper's values come from harness/paper/tables.yaml (Vaswani et al. 2017, arXiv:1706.03762 v7). "
              f"Paper BLEU: {m.get('bleu', '?')}. Paper cost: {m.get('cost', '?')}.", ""]
    if synthetic_data(results["runs"]):
        lines += ["This invocation trained on the made-up corpus (`data.name=synth`) with shrunken models, not "
                  "WMT14: our BLEU is not comparable with the paper's newstest2014 BLEU, nor our costs with its "
                  "GPUs'; what carries over is how the cost is computed, and the utilization the two ways imply.", ""]
    lines += ["## The paper's Table 2, as published", ""]
    lines += _md_table(["Model", "BLEU EN-DE", "BLEU EN-FR", "Training cost (FLOPs) EN-DE", "Training cost (FLOPs) EN-FR"],
                       [[name, _num(r.get("bleu_en_de"), "{:g}"), _num(r.get("bleu_en_fr"), "{:g}"),
                         _num(r.get("cost_en_de"), "{:.1e}"), _num(r.get("cost_en_fr"), "{:.1e}")]
                        for name, r in ((n, {k: NAN if v is None else v for k, v in r.items()})
                                        for n, r in t2["rows"].items())])
    lines += ["", "## Ours", "",
              "BLEU on our test split: `sacre` is sacreBLEU (detokenized, 13a), `tok` the paper's tokenized "
              "definition; means ± sample std (ddof=1) over the seeds that FINISHED (`seeds` = finished / run). "
              "Cost the paper's way = training seconds × 1 device × this device's measured matmul rate "
              "(`device_matmul_tflops`, standing for footnote 5's assumed rate per GPU); counted = the model's "
              "FLOPs over the tokens trained on (harness/probes/flops.py); implied utilization = counted / "
              "the paper's way. Checkpoints: averaged / requested; the last checkpoint alone is scored on the same "
              "test sentences before averaging, so the Δ column is what averaging (§6.1) did.", ""]
    head = ["row", "paper model", "N, d_model, d_ff, h", "seeds", "test BLEU sacre", "test BLEU tok", "dev PPL",
            "test PPL", "test BLEU tok, last checkpoint alone", "Δ BLEU tok from averaging", "test PPL, last alone",
            "params (M)", "steps", "checkpoints", "training (min)", "device TFLOPS",
            "cost, paper's way (FLOPs)", "counted FLOPs", "implied utilization", "paper BLEU EN-DE",
            "paper cost EN-DE (FLOPs)", "notes"]
    body = []
    for r in table.to_dict("records"):
        arch = ", ".join(_num(r[c], "{:g}") for c in ("N", "d_model", "d_ff", "h"))
        body.append([f"**{r['row']}**", r["paper_model"] or "–", arch, _seeds(r),
                     _pm(r["test_bleu_mean"], r["test_bleu_std"]), _pm(r["test_bleu_tok_mean"], r["test_bleu_tok_std"]),
                     _num(r["dev_ppl"]), _num(r["test_ppl"]),
                     _pm(r["test_bleu_tok_last_mean"], r["test_bleu_tok_last_std"]),
                     _num(r["averaging_gain_bleu_tok"], "{:+.2f}"), _num(r["test_ppl_last_mean"]),
                     _num(r["params_M"], "{:.3g}"), _num(r["steps"], "{:.0f}"),
                     f"{_num(r['averaged_checkpoints'], '{:g}')} / {_num(r['average_last'], '{:g}')}",
                     _num(r["train_minutes"], "{:.1f}"), _num(r["device_matmul_tflops"], "{:.3g}"),
                     _num(r["cost_paper_way"], "{:.2e}"), _num(r["cost_counted"], "{:.2e}"),
                     _num(100 * r["implied_utilization"], "{:.1f} %"), _num(r["paper_bleu_en_de"], "{:g}"),
                     _num(r["paper_cost_en_de"], "{:.1e}"), _failure(r)])
    lines += _md_table(head, body)
    lines += ["", "## The paper's own cost, two ways", "",
              "The paper's cost is training time × GPUs × an assumed sustained rate per GPU (footnote 5). "
              "Recomputed from §5.2's hours and GPUs, and against it the model's FLOPs counted per step (for "
              "25 k source + 25 k target tokens, harness/probes/cost.py) × the steps: their ratio is the "
              "utilization of the assumed rate that the paper's own runs imply.", ""]
    gpu = {name: run.get("gpu", "?") for name, run in t2.get("training", {}).items()}
    lines += _md_table(["model", "GPUs × hours", "assumed TFLOPS per GPU", "paper cost (FLOPs)",
                        "recomputed (FLOPs)", "counted FLOPs per step", "steps", "counted FLOPs",
                        "implied utilization", "achieved TFLOPS per GPU"],
                       [[c["model"], f"{c['gpus']} {gpu.get(c['model'], '?')} × {c['hours']:g} h",
                         _num(c["assumed_tflops_per_gpu"], "{:g}"), _num(c["paper_cost"], "{:.1e}"),
                         _num(c["paper_method_recomputed"], "{:.2e}"), _num(c["step_flops"], "{:.3e}"),
                         f"{c['steps']:,}", _num(c["counted_cost"], "{:.2e}"),
                         _num(100 * c["implied_utilization"], "{:.1f} %"), _num(c["achieved_tflops_per_gpu"])]
                        for c in costs])
    return lines


def plot_table2_bleu_vs_cost(study: str, table: pd.DataFrame, path: Path) -> Path:
    """Left: our test BLEU against training cost, both ways. Right: the paper's EN-DE BLEU against its cost."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ours, theirs = fig.subplots(1, 2)
    ok = table.dropna(subset=["test_bleu_tok_mean"])
    for col, fmt, label in (("cost_counted", "o", "counted FLOPs"), ("cost_paper_way", "s", "the paper's way")):
        pts = ok.dropna(subset=[col])
        if len(pts):
            ours.errorbar(pts[col], pts["test_bleu_tok_mean"], yerr=pts["test_bleu_tok_std"].fillna(0), fmt=fmt,
                          mfc="none" if fmt == "s" else None, capsize=3, label=f"BLEU tok vs cost, {label}")
            for r in pts.itertuples(index=False):
                ours.annotate(r.row, (getattr(r, col), r.test_bleu_tok_mean), textcoords="offset points",
                              xytext=(4, 4), fontsize=8)
    if ours.get_legend_handles_labels()[0]:
        ours.set_xscale("log")
        ours.legend(fontsize=7)
    else:
        _no_data(ours, "finished rows")
    ours.set(xlabel="training cost (FLOPs)", ylabel="test BLEU (tokenized)", title=f"{study}: ours")
    rows = [(n, r["cost_en_de"], r["bleu_en_de"]) for n, r in load_tables()["table2"]["rows"].items()
            if r.get("cost_en_de") is not None and r.get("bleu_en_de") is not None]
    if rows:
        theirs.plot([c for _, c, _ in rows], [b for _, _, b in rows], "o", color="C1")
        for name, cost, bleu in rows:
            theirs.annotate(name, (cost, bleu), textcoords="offset points", xytext=(4, 2), fontsize=6)
        theirs.set_xscale("log")
    theirs.set(xlabel="training cost (FLOPs)", ylabel="newstest2014 EN-DE BLEU", title="the paper's Table 2")
    return _save(fig, path)


def plot_table2_utilization(study: str, table: pd.DataFrame, costs: list[dict], path: Path) -> Path:
    """Counted FLOPs / cost the paper's way: ours (of this device's matmul rate) and the paper's (of a P100's)."""
    t2 = load_tables()["table2"]
    bars = [(f"{r['row']} (ours, {r['device'] or '?'})", 100 * r["implied_utilization"], "C0")
            for r in table.to_dict("records") if pd.notna(r["implied_utilization"])]
    bars += [(f"{c['model']}\n(paper, {t2['training'][c['model']].get('gpu', '?')})", 100 * c["implied_utilization"],
              "C1") for c in costs]
    fig = Figure(figsize=(max(6, 1.6 * len(bars)), 4.5), layout="constrained")
    ax = fig.add_subplot()
    if bars:
        ax.bar(range(len(bars)), [b[1] for b in bars], color=[b[2] for b in bars])
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
        for i, (_, v, _) in enumerate(bars):
            ax.annotate(f"{v:.1f} %", (i, v), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    else:
        _no_data(ax, "costs")
    ax.set(ylabel="counted FLOPs / cost the paper's way (%)",
           title=f"{study}: implied utilization of the assumed rate (ours: this device's matmul rate)")
    return _save(fig, path)


def write_table2(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    from .probes.cost import training_costs
    table, costs = summarize_table2(results["runs"], declared_rows(results["parent"])), training_costs()
    plots = [plot_table2_bleu_vs_cost(study, table, out_dir / f"{study}_bleu_vs_cost.png"),
             plot_table2_utilization(study, table, costs, out_dir / f"{study}_utilization.png")]
    return _write(study, out_dir, render_table2(study, results, table, costs), table, plots,
                  claims_section(study, results["runs"], uri))


# ------------------------------------------------------------------------------------------ Table 4

def _table4_ours() -> dict[str, str]:
    """Our row -> the paper's row whose `ours` names it (tables.yaml)."""
    return {spec["ours"]: name for name, spec in load_tables()["table4"]["rows"].items() if spec.get("ours")}


def summarize_table4(runs: pd.DataFrame, declared: list[str]) -> pd.DataFrame:
    """One line per row: setup as run, test and dev parse scores (mean over FINISHED seeds; F1 with std),
    PPL, size and time, with the paper's F1 for the Transformer row that names it."""
    rows, ours = load_tables()["table4"]["rows"], _table4_ours()
    records = []
    for row, g, done, status, reason in row_groups(runs, row_order(runs, list(ours), declared)):
        src = (done if len(done) else g).iloc[0]
        name = ours.get(row, "")
        rec = {"row": row, "paper_parser": name, "paper_f1": float(rows[name]["f1"]) if name else NAN,
               "status": status, "n_seeds": len(g), "n_finished": len(done), "data": _text(src, "params.data.name"),
               **{c: _param(src, k) for c, k in T4_SETUP.items()}}
        for split in ("test", "dev"):
            rec.update({f"{split}_{s}": _mean(done, f"{split}_{s}") for s in T4_SCORES})
            rec[f"{split}_f1_std"] = _std(done, f"{split}_f1")
        rec.update({m: _mean(done, m) for m in ("dev_ppl", "test_ppl", "steps", "train_seconds",
                                                "test_f1_constrained", "test_well_formed_constrained",
                                                "dev_f1_constrained")})
        rec["params_M"] = _mean(done, "params") / 1e6
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
              "`well-formed` is the share of raw outputs that were already trees before the repair. Means (F1: "
              "± sample std, ddof=1) over the seeds that FINISHED; `seeds` = finished / run.", ""]
    if synthetic_data(results["runs"]):
        lines += ["This invocation parsed the made-up grammar's trees (`data.name=synth`), not the Penn Treebank, "
                  "with shrunken models: our F1 is not comparable with the paper's WSJ section 23 F1; only the "
                  "comparison between our rows (more training trees against fewer) is.", ""]
    by = {r["row"]: r for r in table.to_dict("records")}
    body = []
    for name, spec in t4["rows"].items():
        mine = spec.get("ours")
        r = by.get(mine) if mine else None
        cell = "" if not mine else f"– (`{mine}` not run)" if r is None else \
            f"{_pm(r['test_f1'], r['test_f1_std'])} (`{mine}`)" if r["n_finished"] else f"{_failure(r)} (`{mine}`)"
        body.append([name, spec.get("training", "–"), _num(spec.get("f1"), "{:.1f}"), cell])
    lines += ["## Table 4 as published, ours beside", ""]
    lines += _md_table(["Parser", "Training", "WSJ 23 F1", "ours: F1 (test)"], body)
    lines += ["", "`constrained` (not the paper's; `train.constrained`): the same sentences decoded again with only "
              "the tokens allowed that keep the output a tree over exactly the sentence's words "
              "(harness/probes/parsing.py TreeConstraint); its outputs are trees by construction."]
    head = ["row", "data", "training trees", "N", "d_model", "beam", "alpha", "seeds", "F1 test", "F1 dev",
            "recall", "precision", "complete match %", "avg crossing", "well-formed %", "F1 test, constrained",
            "F1 dev, constrained", "test PPL", "params (M)", "steps", "training (min)", "paper F1", "notes"]
    body = [[f"**{r['row']}**", r["data"] or "–", _num(r["train_trees"], "{:.0f}"), _num(r["N"], "{:g}"),
             _num(r["d_model"], "{:g}"), _num(r["beam"], "{:g}"), _num(r["alpha"], "{:g}"), _seeds(r),
             _pm(r["test_f1"], r["test_f1_std"]), _pm(r["dev_f1"], r["dev_f1_std"]), _num(r["test_recall"]),
             _num(r["test_precision"]), _num(r["test_complete_match"]), _num(r["test_average_crossing"]),
             _num(r["test_well_formed"], "{:.1f}"), _num(r.get("test_f1_constrained")),
             _num(r.get("dev_f1_constrained")), _num(r["test_ppl"]), _num(r["params_M"], "{:.3g}"),
             _num(r["steps"], "{:.0f}"), _num(r["train_minutes"], "{:.1f}"), _num(r["paper_f1"], "{:.1f}"),
             _failure(r)] for r in table.to_dict("records")]
    lines += ["", "## Ours in detail (test split unless marked dev)", "", *_md_table(head, body)]
    return lines


def plot_table4_f1(study: str, table: pd.DataFrame, path: Path) -> Path:
    """Test and dev F1 per row (ours), with the paper's WSJ 23 F1 marked on the rows that map to it."""
    fig = Figure(figsize=(max(5, 1.5 * len(table) + 2), 4.5), layout="constrained")
    ax = fig.add_subplot()
    x = list(range(len(table)))
    for shift, split, color in ((-0.2, "test", "C0"), (0.2, "dev", "C2")):
        ax.bar([i + shift for i in x], table[f"{split}_f1"].fillna(0), width=0.4,
               yerr=table[f"{split}_f1_std"].fillna(0), capsize=3, color=color, label=f"ours, {split} F1")
    paper = table["paper_f1"]
    if paper.notna().any():
        ax.plot([i for i, v in zip(x, paper) if pd.notna(v)], paper.dropna(), "k_", ms=30, mew=2,
                label="paper, WSJ 23 F1")
    ax.set_xticks(x, [r["row"] + ("" if r["status"] == "FINISHED" else f"\n{r['status']}")
                      for r in table.to_dict("records")])
    ax.set(ylabel="bracketing F1", ylim=(0, 100), title=f"{study}: parsing F1 per row")
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def write_table4(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    runs = results["runs"]
    table = summarize_table4(runs, declared_rows(results["parent"]))
    plots = [plot_table4_f1(study, table, out_dir / f"{study}_f1.png"),
             plot_learning_curves(study, runs, table["row"].tolist(), uri, out_dir / f"{study}_learning_curves.png")]
    return _write(study, out_dir, render_table4(study, results, table), table, plots, claims_section(study, runs, uri))


# The paper table (the parent's `table` tag) -> its writer: (study, results, uri, out_dir) -> [md, csv, *pngs].
WRITERS = {"table1": write_table1, "table2": write_table2, "table4": write_table4}
