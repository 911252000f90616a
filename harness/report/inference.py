"""The inference report (studies/inference.yaml): per model shape, batch and source length, prefill and decode
throughput, time to first token, peak memory and the KV cache per token measured beside its formula; plots of
decode throughput, time to first token and cache size against the source length. Reads MLflow only."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.report.cells import bracket_cell, md_table
from harness.report.claims_section import claims_section
from harness.report.curves import plain_log_labels, plot_title, series_style
from harness.report.files import save_png, write_files
from harness.report.header import header_lines
from harness.report.results import row_order
from harness.report.sections import architecture_section

_POINT = re.compile(r"^metrics\.decode_tok_s_b(\d+)_s(\d+)$")


def points(runs: pd.DataFrame) -> list[tuple[int, int]]:
    """The (batch, source length) points the runs logged, in order."""
    return sorted({(int(m[1]), int(m[2])) for c in runs.columns if (m := _POINT.match(c))})


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One line per finished row, batch and source length."""
    done = runs[runs["status"] == "FINISHED"]
    records = []
    for row in row_order(done):
        r = done[done["tags.row"].astype(str) == row].iloc[0]
        new_tokens = pd.to_numeric(r.get("params.probe.new_tokens"), errors="coerce")
        for batch, src in points(runs):
            suffix = f"_b{batch}_s{src}"
            get = lambda k: r.get(f"metrics.{k}{suffix}", float("nan"))     # noqa: E731
            if pd.isna(get("decode_tok_s")):
                continue
            records.append({
                "row": row, "family": r.get("params.model.family"), "kv_heads": r.get("params.model.n_kv_heads"),
                "params": r.get("metrics.params"), "batch": batch, "src_len": src, "new_tokens": new_tokens,
                "prefill_tok_s": get("prefill_tok_s"), "decode_tok_s": get("decode_tok_s"), "ttft_ms": get("ttft_ms"),
                "peak_mem_bytes": get("peak_mem_bytes"), "kv_bytes_per_token": get("kv_bytes_per_token"),
                "kv_bytes_per_token_formula": r.get("metrics.kv_bytes_per_token_formula"),
                "kv_bytes_per_source_token": get("kv_bytes_per_source_token"),
                "kv_bytes_per_source_token_formula": r.get("metrics.kv_bytes_per_source_token_formula"),
                "device": r.get("tags.device"), "dtype": r.get("tags.dtype")})
    table = pd.DataFrame(records)
    if len(table):
        # One sentence's cache after decoding new_tokens tokens from a source of src_len: self-attention over
        # the target, plus the cross-attention (encoder-decoder) or prefilled (decoder-only) cache over the source.
        table["kv_bytes_per_sentence"] = table["kv_bytes_per_token"] * table["new_tokens"] + \
            table["kv_bytes_per_source_token"] * table["src_len"]
    return table


def _num(x, fmt: str) -> str:
    return "–" if x is None or pd.isna(x) else fmt.format(x)


def render(table: pd.DataFrame) -> list[str]:
    head = ["row", "params", "batch", "source tokens", "prefill tok/s", "decode tok/s", "TTFT (ms)", "peak memory "
                                                                                                     "(MiB)",
            "KV bytes / target token, measured", "formula", "KV bytes / source token, measured", "formula"]
    body = [[f"**{r.row}**", _num(r.params, "{:,.0f}"), r.batch, r.src_len, _num(r.prefill_tok_s, "{:,.0f}"),
             _num(r.decode_tok_s, "{:,.0f}"), _num(r.ttft_ms, "{:.1f}"), _num(r.peak_mem_bytes / 2**20, "{:,.0f}"),
             _num(r.kv_bytes_per_token, "{:,.0f}"), _num(r.kv_bytes_per_token_formula, "{:,.0f}"),
             _num(r.kv_bytes_per_source_token, "{:,.0f}"), _num(r.kv_bytes_per_source_token_formula, "{:,.0f}")]
            for r in table.itertuples(index=False)]
    return md_table(head, body)


def _source_axis(ax, table: pd.DataFrame) -> None:
    """A log axis of source lengths labelled at the lengths measured (no crowded minor labels)."""
    lengths = sorted(int(x) for x in table["src_len"].unique())
    ax.set_xticks(lengths, [str(x) for x in lengths])
    ax.minorticks_off()


def _log_values(ax) -> None:
    """A log axis of values with labels at 1, 2 and 5 of every decade, written out (not 10^x): enough ticks to read
    a value off a short range; under a decade (decode tokens/s from 470 to 1300), round numbers (600, 800, 1000)."""
    from matplotlib.ticker import LogLocator, ScalarFormatter
    ax.autoscale_view()
    low, high = ax.get_ylim()
    if 0 < low and high < 10 * low:
        plain_log_labels(ax.yaxis)
        return
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.minorticks_off()


_MARKS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def _nested(k: int) -> dict:
    """The k-th row's line: its own colour and hollow marker, each row's marker smaller than the last, so that rows
    of equal values (a KV cache the same size under two shapes) show as nested markers, not one line hiding
    another."""
    return {**series_style(k), "marker": _MARKS[k % len(_MARKS)], "mfc": "none", "ms": max(3.0, 10.0 - 0.7 * k),
            "lw": 1.0}


def _legend_outside(fig: Figure, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7)


def plot(table: pd.DataFrame, path: Path, title: str = "inference") -> Path:
    batches = sorted(table["batch"].unique())
    fig = Figure(figsize=(5 * (len(batches) + 1), 4.2), layout="constrained")
    for i, batch in enumerate(batches):
        ax = fig.add_subplot(1, len(batches) + 1, i + 1)
        for k, (row, g) in enumerate(table[table["batch"] == batch].groupby("row", sort=False)):
            ax.plot(g["src_len"], g["decode_tok_s"], label=row, **_nested(k))
        ax.set(xscale="log", yscale="log", xlabel="source tokens", ylabel="decode tokens/s",
               title=f"decoding, batch {batch}")
        _source_axis(ax, table)
        _log_values(ax)
    ax = fig.add_subplot(1, len(batches) + 1, len(batches) + 1)
    first = table[table["batch"] == batches[0]]
    for k, (row, g) in enumerate(first.groupby("row", sort=False)):
        ax.plot(g["src_len"], g["kv_bytes_per_sentence"] / 2**10, label=row, **_nested(k))
    ax.set(xscale="log", yscale="log", xlabel="source tokens", ylabel="KiB",
           title="KV cache per sentence (measured)")
    _source_axis(ax, table)
    _log_values(ax)
    fig.suptitle(f"{title}: decoding speed and KV cache by source length", fontsize=10)
    _legend_outside(fig, ax)
    return save_png(fig, path)


def plot_ttft(table: pd.DataFrame, path: Path, title: str = "inference") -> Path:
    fig = Figure(figsize=(6, 4.2), layout="constrained")
    ax = fig.add_subplot()
    batch = table["batch"].max()
    for k, (row, g) in enumerate(table[table["batch"] == batch].groupby("row", sort=False)):
        ax.plot(g["src_len"], g["ttft_ms"], label=row, **_nested(k))
    ax.set(xscale="log", yscale="log", xlabel="source tokens", ylabel="ms",
           title=f"{title}: time to first token, batch {batch}")
    _source_axis(ax, table)
    _log_values(ax)
    _legend_outside(fig, ax)
    return save_png(fig, path)


def write_inference(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    runs = results["runs"]
    table = summarize(runs)
    lines = header_lines(study, results, "inference cost by model shape", paper_caption=False)
    if not len(table):
        return write_files(study, out_dir, lines + ["No trial finished."], table, [])
    device, dtype = table["device"].dropna().iloc[0], table["dtype"].dropna().iloc[0]
    new_tokens = int(table["new_tokens"].dropna().iloc[0])
    lines += ["Each shape at inference on " + f"{device} ({dtype}): random source tokens (no padding) prefilled, then "
              f"{new_tokens} greedy decoding steps through the cached step beam search uses, the medians of the "
              "timed repeats (`python -m harness probe inference` measures the same without MLflow; "
              "harness/probes/inference.py says how). The prefill reads every source token at once, compute-bound; a "
              "decoding step reads every weight and the whole cache for one token a sentence, bound by memory "
              "traffic. The KV cache is read from its tensors after decoding and stands beside the formula 2 x layers "
              "x kv_heads x head_dim x bytes per token: per target token the self-attention cache; per source token "
              "the encoder-decoder's cross-attention cache (fixed by the source) or the decoder-only model's "
              "prefilled cache (which, with the target's, grows with every token). Peak memory is CUDA's allocated "
              "peak on a GPU; on a CPU the process's resident set (weights, libraries and all).", ""]
    lines += render(table) + [""]
    lines += claim_figures(runs, list(dict.fromkeys(table["row"])))
    lines += architecture_section(runs, list(dict.fromkeys(table["row"])))
    title = plot_title(study, runs)
    plots = [plot(table, out_dir / f"{study}_decode.png", title),
             plot_ttft(table, out_dir / f"{study}_ttft.png", title)]
    return write_files(study, out_dir, lines, table, plots, claims_section(study, runs, uri, results["parent"]))


def claim_figures(runs: pd.DataFrame, rows: list[str]) -> list[str]:
    """Per row, what the claims read (harness/probes/inference.py, summary_metrics), mean over the seeds (each a
    repeat of the measurement) with its 95 % interval."""
    done = runs[runs["status"] == "FINISHED"]
    keys = ("kv_fraction_of_mha", "kv_heads_fraction", "decode_batch_gain", "prefill_batch_gain",
            "decode_over_prefill_gain", "decode_tok_s_last")
    if "metrics.decode_tok_s_last" not in done:
        return []
    body = []
    for row in rows:
        g = done[done["tags.row"].astype(str) == row]
        values = {k: pd.to_numeric(g.get(f"metrics.{k}"), errors="coerce").dropna().tolist() for k in keys}
        body.append([f"**{row}**", len(g), *(bracket_cell(values[k], "{:.3f}") for k in keys[:5]),
                     bracket_cell(values["decode_tok_s_last"], "{:,.0f}")])
    return ["## What the claims read", "",
            "Per row, over the seeds (each a repeat of the whole measurement): the cache per token read from its "
            "tensors over the formula's with a key/value head for every query head, beside kv heads / query heads; at "
            "the longest source, each phase's throughput gain from the smallest batch to the largest as a share of "
            "linear (1: tokens/s grow as the batch), and decode's over prefill's; decode tokens/s at the largest batch "
            "and longest source.", "",
            *md_table(["row", "seeds", "KV / full-head KV", "KV heads / heads", "decode batch gain",
                       "prefill batch gain", "decode / prefill gain", "decode tok/s (last point)"], body), ""]
