"""Table 2 in the paper's layout: base and big, BLEU with and without checkpoint averaging, and the
training cost two ways beside the paper's (MLflow -> reports/<study>.md, .csv, PNGs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.paper import columns, load_tables
from harness.report.cells import failure_cell, md_table, num, pm, seeds_cell
from harness.report.claims_section import claims_section
from harness.report.curves import plot_title, sci_log_labels
from harness.report.files import save_png, write_files
from harness.report.header import header_lines
from harness.report.labels import place_labels
from harness.report.results import (
    NAN,
    column,
    declared_rows,
    mean_of,
    param_of,
    row_groups,
    row_order,
    std_of,
    synthetic_data,
    tags_of,
    text_of,
)
from harness.report.sections import architecture_section, measurement_sections
from harness.report.stats import t975
from harness.report.stopping import stopping_notes

# Table 2: our study rows -> the paper's row names (tables.yaml table2.rows / table2.training), and the
# language pair each row trains on (studies/table2.yaml: base and big EN-DE, base_enfr and big_enfr EN-FR).
T2_ROWS = {"base": "Transformer (base model)", "big": "Transformer (big)",
           "base_enfr": "Transformer (base model)", "big_enfr": "Transformer (big)",
           "gnmt": "GNMT + RL", "convs2s": "ConvS2S"}      # the rivals, trained here (model/rnn.py, model/conv.py)
T2_EN_FR_ROWS = {"base_enfr", "big_enfr"}
PAIRS = {"en_de": "EN-DE", "en_fr": "EN-FR"}   # the suffixes of tables.yaml's bleu_* / cost_* columns
PAPER_KEYS = ("bleu_en_de", "bleu_en_fr", "cost_en_de", "cost_en_fr", "bleu", "cost")
T2_ARCH = {**columns("N", "d_model", "d_ff", "h", "P_drop"), "average_last": "train.average_last"}


def row_pair(row: str, data_name: str, target: str = "") -> str:
    """The language pair a row trained on: Table 2's EN-FR rows, any row whose data directory is an EN-FR
    one (e.g. `--set data.name=data/wmt14-en-fr`) or that trained on the made-up corpus's French-like target
    (`data.target=fr`); EN-DE otherwise (the German-like made-up corpus stands for EN-DE)."""
    fr = row in T2_EN_FR_ROWS or "en-fr" in Path(data_name or "").name or (data_name == "synth" and target == "fr")
    return "en_fr" if fr else "en_de"


def summarize_table2(runs: pd.DataFrame, declared: list[str]) -> pd.DataFrame:
    """One line per row: test/dev BLEU (mean and std over FINISHED seeds), PPL, size, time, and the cost two
    ways (the paper's: seconds x 1 device x this device's matmul rate; counted: train_flops), with the
    paper's BLEU and cost beside: both pairs' (paper_*_en_de, paper_*_en_fr) and the row's own pair's
    (paper_bleu, paper_cost)."""
    paper = load_tables()["table2"]["rows"]
    runs = runs.assign(cost_paper_way=column(runs, "metrics.train_seconds")
                       * column(runs, "metrics.device_matmul_tflops") * 1e12,
                       cost_counted=column(runs, "metrics.train_flops"))
    runs["implied_utilization"] = runs["cost_counted"] / runs["cost_paper_way"]
    records = []
    for row, g, done, status, reason in row_groups(runs, row_order(runs, list(T2_ROWS), declared)):
        src = (done if len(done) else g).iloc[0]
        name = T2_ROWS.get(row, "")
        data_name = text_of(src, "params.data.name")
        pair = row_pair(row, data_name, text_of(src, "params.data.target"))
        rec = {"row": row, "paper_model": name, "pair": PAIRS[pair], "status": status, "n_seeds": len(g),
               "n_finished": len(done), "data": data_name, **{c: param_of(src, k) for c, k in T2_ARCH.items()}}
        for m in ("test_bleu", "test_bleu_tok", "dev_bleu", "dev_bleu_tok", "test_bleu_tok_last", "test_ppl_last",
                  "test_bleu_tok_lc", "dev_bleu_tok_lc", "test_bleu_tok_lc_last"):
            rec[f"{m}_mean"], rec[f"{m}_std"] = mean_of(done, m), std_of(done, m)
        # What averaging the last checkpoints bought over the last checkpoint alone, seed by seed.
        rec["averaging_gain_bleu_tok"] = (column(done, "metrics.test_bleu_tok")
                                          - column(done, "metrics.test_bleu_tok_last")).mean()
        rec.update({m: mean_of(done, m) for m in ("dev_ppl", "test_ppl", "steps", "averaged_checkpoints",
                                                "train_seconds", "eval_seconds", "tokens_seen",
                                                "flops_per_target_token", "device_matmul_tflops")})
        rec["params_M"] = mean_of(done, "params") / 1e6
        rec["train_minutes"] = rec["train_seconds"] / 60
        rec.update({c: done[c].mean() for c in ("cost_paper_way", "cost_counted", "implied_utilization")})
        rec["device"] = tags_of(done, "device")
        theirs = {k: NAN if v is None else v for k, v in paper.get(name, {}).items()}
        theirs.update(bleu=theirs.get(f"bleu_{pair}", NAN), cost=theirs.get(f"cost_{pair}", NAN))
        rec.update({f"paper_{k}": theirs.get(k, NAN) for k in PAPER_KEYS})
        rec["failure_reason"] = reason
        records.append(rec)
    return pd.DataFrame.from_records(records).astype({f"paper_{k}": float for k in PAPER_KEYS})


def paper_layout(table: pd.DataFrame) -> list[list[str]]:
    """Our rows in the paper's Table 2 layout: one line per Transformer model, each pair's BLEU (tokenized, the
    paper's definition) and cost (the paper's way) from the row that trained on that pair, the paper's
    value beside; "–" where no such row ran (e.g. EN-FR in the tiny profile)."""
    by_cell = {(r["paper_model"], r["pair"]): r for r in table.to_dict("records") if r["paper_model"]}
    body = []
    for model in dict.fromkeys(T2_ROWS.values()):
        if not model.startswith("Transformer") and not any(m == model for m, _ in by_cell):
            continue              # a rival this profile did not train: its published row stands below
        line = [model]
        for what in ("bleu", "cost"):
            for key, pair in PAIRS.items():
                r = by_cell.get((model, pair))
                if what == "bleu":
                    ours = pm(r["test_bleu_tok_mean"], r["test_bleu_tok_std"]) if r else "–"
                    theirs = num(r["paper_bleu"], "{:g}") if r else "–"
                else:
                    ours = num(r["cost_paper_way"], "{:.2e}") if r else "–"
                    theirs = num(r["paper_cost"], "{:.1e}") if r else "–"
                line += [f"{ours} ({r['row']})" if r else ours, theirs]
        body.append(line)
    return body


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
    if multi30k_rows(table):
        lines += multi30k_section(table)
    lines += ["## The paper's Table 2, as published", ""]
    lines += md_table(["Model", "BLEU EN-DE", "BLEU EN-FR", "Training cost (FLOPs) EN-DE", "Training cost (FLOPs) "
                                                                                           "EN-FR"],
                       [[name, num(r.get("bleu_en_de"), "{:g}"), num(r.get("bleu_en_fr"), "{:g}"),
                         num(r.get("cost_en_de"), "{:.1e}"), num(r.get("cost_en_fr"), "{:.1e}")]
                        for name, r in ((n, {k: NAN if v is None else v for k, v in r.items()})
                                        for n, r in t2["rows"].items())])
    lines += ["", "## Ours in the paper's layout", "",
              "Test BLEU tokenized as the paper's (mean ± std over finished seeds) and the training cost the paper's "
              "way, each from the row (in brackets) that trained on that pair, the paper's value beside. On the "
              "made-up "
              "corpus the EN-FR rows train on its French-like target (`data.target=fr`): the same English-like "
              "sources, in the source's order, with French-like agreement and elision.", ""]
    lines += md_table(["Model", "BLEU EN-DE", "paper", "BLEU EN-FR", "paper", "cost EN-DE (FLOPs)", "paper",
                       "cost EN-FR (FLOPs)", "paper"], paper_layout(table))
    lines += ["", "## Ours", "",
              "BLEU on our test split: `sacre` is sacreBLEU (detokenized, 13a), `tok` the paper's tokenized "
              "definition; means ± sample std (ddof=1) over the seeds that FINISHED (`seeds` = finished / run). "
              "Cost the paper's way = training seconds × 1 device × this device's measured matmul rate "
              "(`device_matmul_tflops`, standing for footnote 5's assumed rate per GPU); counted = the model's "
              "FLOPs over the tokens trained on (harness/probes/flops.py); implied utilization = counted / "
              "the paper's way. Checkpoints: averaged / requested; the last checkpoint alone is scored on the same "
              "test sentences before averaging, so the Δ column is what averaging (§6.1) did.", ""]
    head = ["row", "paper model", "N, d_model, d_ff, h", "seeds", "test BLEU sacre", "test BLEU tok",
            "test BLEU tok lc", "dev PPL",
            "test PPL", "test BLEU tok, last checkpoint alone", "Δ BLEU tok from averaging", "test PPL, last alone",
            "params (M)", "steps", "checkpoints", "training (min)", "device TFLOPS",
            "cost, paper's way (FLOPs)", "counted FLOPs", "implied utilization", "pair", "paper BLEU",
            "paper cost (FLOPs)", "notes"]
    body, stops = [], stopping_notes(results["runs"])
    for r in table.to_dict("records"):
        arch = ", ".join(num(r[c], "{:g}") for c in ("N", "d_model", "d_ff", "h"))
        body.append([f"**{r['row']}**", r["paper_model"] or "–", arch, seeds_cell(r),
                     pm(r["test_bleu_mean"], r["test_bleu_std"]), pm(r["test_bleu_tok_mean"], r["test_bleu_tok_std"]),
                     pm(r["test_bleu_tok_lc_mean"], r["test_bleu_tok_lc_std"]), num(r["dev_ppl"]), num(r["test_ppl"]),
                     pm(r["test_bleu_tok_last_mean"], r["test_bleu_tok_last_std"]),
                     num(r["averaging_gain_bleu_tok"], "{:+.2f}"), num(r["test_ppl_last_mean"]),
                     num(r["params_M"], "{:.3g}"), num(r["steps"], "{:.0f}"),
                     f"{num(r['averaged_checkpoints'], '{:g}')} / {num(r['average_last'], '{:g}')}",
                     num(r["train_minutes"], "{:.1f}"), num(r["device_matmul_tflops"], "{:.3g}"),
                     num(r["cost_paper_way"], "{:.2e}"), num(r["cost_counted"], "{:.2e}"),
                     num(100 * r["implied_utilization"], "{:.1f} %"), r["pair"], num(r["paper_bleu"], "{:g}"),
                     num(r["paper_cost"], "{:.1e}"), "; ".join(x for x in (failure_cell(r), stops.get(r["row"])) if x)])
    lines += md_table(head, body)
    lines += ["", "## The paper's own cost, two ways", "",
              "The paper's cost is training time × GPUs × an assumed sustained rate per GPU (footnote 5). "
              "Recomputed from §5.2's hours and GPUs, and against it the model's FLOPs counted per step (for "
              "25 k source + 25 k target tokens, harness/probes/cost.py) × the steps: their ratio is the "
              "utilization of the assumed rate that the paper's own runs imply.", ""]
    gpu = {name: run.get("gpu", "?") for name, run in t2.get("training", {}).items()}
    lines += md_table(["model", "GPUs × hours", "assumed TFLOPS per GPU", "paper cost (FLOPs)",
                        "recomputed (FLOPs)", "counted FLOPs per step", "steps", "counted FLOPs",
                        "implied utilization", "achieved TFLOPS per GPU"],
                       [[c["model"], f"{c['gpus']} {gpu.get(c['model'], '?')} × {c['hours']:g} h",
                         num(c["assumed_tflops_per_gpu"], "{:g}"), num(c["paper_cost"], "{:.1e}"),
                         num(c["paper_method_recomputed"], "{:.2e}"), num(c["step_flops"], "{:.3e}"),
                         f"{c['steps']:,}", num(c["counted_cost"], "{:.2e}"),
                         num(100 * c["implied_utilization"], "{:.1f} %"), num(c["achieved_tflops_per_gpu"])]
                        for c in costs])
    return lines


def multi30k_rows(table: pd.DataFrame) -> list[dict]:
    """The rows that trained on a Multi30K directory (`data prepare multi30k`)."""
    return [r for r in table.to_dict("records") if "multi30k" in Path(str(r.get("data") or "")).name.lower()]


def _ci95(r: dict, metric: str) -> str:
    """A literature-table cell: our mean over the finished seeds ± the half-width of its 95 % t-interval, with the
    seeds counted (a published figure is one run; ours, where there are seeds, is their mean and its interval)."""
    n = int(r.get("n_finished") or 0)
    mean, std = r[f"{metric}_mean"], r[f"{metric}_std"]
    if n < 2 or pd.isna(std):
        return num(mean, "{:.2f}") + (" (1 seed)" if n == 1 and not pd.isna(mean) else "")
    return f"{mean:.2f} ± {t975(n - 1) * std / math.sqrt(n):.2f} ({n} seeds, 95 % interval)"


def multi30k_section(table: pd.DataFrame) -> list[str]:
    """Multi30K: what the test set is, BLEU both ways and the literature's tokenized lowercased BLEU, with the
    published anchors (harness/paper/tables.yaml `literature.multi30k`) and their settings beside ours."""
    lit = load_tables()["literature"]["multi30k"]
    lines = ["This invocation trained on Multi30K task 1 (29,000 image descriptions; dev = val, test = "
             "test_2016_flickr, 1,000 sentences), not WMT14: its BLEU is not comparable with the paper's newstest2014 "
             "BLEU. BLEU is given both ways: sacreBLEU on the detokenized text (its signature above), and the "
             f"multimodal-MT literature's `BLEU tok lc`: {lit['bleu_tok_lc']}. A row trained on that lowercased "
             "tokenized form (`data prepare multi30k --form lc.norm.tok`) has BLEU tok lc only (its output is "
             "tokenized text, which sacreBLEU does not score). `python -m harness evaluate RUN_DIR "
             "--data DIR --split test_2017_flickr` scores a finished row on the second test set.", "",
             "## Beside the literature (Multi30K)", ""]
    body = [[f"**{r['row']}** (ours)", r["pair"], "test_2016_flickr",
             _ci95(r, "test_bleu_tok_lc"), _ci95(r, "test_bleu"),
             f"N {num(r['N'], '{:g}')}, d_model {num(r['d_model'], '{:g}')}, d_ff {num(r['d_ff'], '{:g}')}, "
             f"h {num(r['h'], '{:g}')}, P_drop {num(r['P_drop'], '{:g}')}, {num(r['steps'], '{:.0f}')} steps, "
             f"{num(r['params_M'], '{:.3g}')} M params, last {num(r['averaged_checkpoints'], '{:g}')} checkpoints "
             f"averaged, {num(r['train_minutes'], '{:.1f}')} min on {r['device'] or '?'}"]
            for r in multi30k_rows(table)]
    body += [[a["name"], PAIRS.get(a["pair"], a["pair"]), a["test"], num(a["bleu_tok_lc"], "{:.2f}"), "–",
              f"{a['setting']} ({a['source']})"] for a in lit["rows"]]
    return lines + md_table(["model", "pair", "test set", "BLEU tok lc", "sacreBLEU", "setting"], body) + [""]


def plot_table2_bleu_vs_cost(study: str, table: pd.DataFrame, path: Path, title: str | None = None) -> Path | None:
    """Left: our test BLEU against training cost, both ways. Right: the paper's BLEU against its cost, EN-DE
    and EN-FR. `title`: the study and profile (plot_title)."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ours, theirs = fig.subplots(1, 2)
    # the tokenized BLEU; on text trained in its lowercased tokenized form (Multi30K's lc.norm.tok) that is BLEU tok lc
    bleu = "test_bleu_tok" if table["test_bleu_tok_mean"].notna().any() else "test_bleu_tok_lc"
    name = "BLEU tok" if bleu == "test_bleu_tok" else "BLEU tok lc"
    ok = table.dropna(subset=[f"{bleu}_mean"])
    mine = []          # (name, cost, BLEU, its spread) of every point drawn, named once the axes are final
    for col, fmt, label in (("cost_counted", "o", "counted FLOPs"), ("cost_paper_way", "s", "the paper's way")):
        pts = ok.dropna(subset=[col])
        if len(pts):
            ours.errorbar(pts[col], pts[f"{bleu}_mean"], yerr=pts[f"{bleu}_std"].fillna(0), fmt=fmt,
                          mfc="none" if fmt == "s" else None, capsize=3, label=f"{name} vs cost, {label}")
            mine += [(r["row"], r[col], r[f"{bleu}_mean"], r[f"{bleu}_std"]) for r in pts.to_dict("records")]
    if ours.get_legend_handles_labels()[0]:
        ours.set_xscale("log")
        ours.legend(fontsize=7)
    else:
        return None                    # the paper's numbers alone say nothing of this study
    ours.set(xlabel="training cost (FLOPs)", ylabel=f"test {name}", title=f"{title or study}: ours")
    if ours.get_xscale() == "log":
        ours.margins(x=0.12)          # room for the row names written right of the rightmost points
        sci_log_labels(ours.xaxis)
    paper = []      # the paper's points crowd (the two EN-FR ensembles 0.04 decades and 0.13 BLEU apart)
    for (key, label), color in zip(PAIRS.items(), ("C1", "C2")):
        rows = [(n, r[f"cost_{key}"], r[f"bleu_{key}"]) for n, r in load_tables()["table2"]["rows"].items()
                if r.get(f"cost_{key}") is not None and r.get(f"bleu_{key}") is not None]
        if rows:
            theirs.plot([c for _, c, _ in rows], [b for _, _, b in rows], "o", color=color, label=label)
            paper += rows
            theirs.set_xscale("log")
    if theirs.get_legend_handles_labels()[0]:
        theirs.legend(fontsize=7, loc="center left")
        theirs.margins(x=0.3)          # room beside the outermost points for their names
    theirs.set(xlabel="training cost (FLOPs)", ylabel="newstest2014 BLEU", title="the paper's Table 2")
    names, xs, ys, errs = zip(*mine)
    place_labels(ours, list(names), list(xs), list(ys), [0.0 if pd.isna(e) else e for e in errs])
    if paper:
        place_labels(theirs, *(list(v) for v in zip(*paper)), fontsize=6)
    return save_png(fig, path)


def plot_table2_utilization(study: str, table: pd.DataFrame, costs: list[dict], path: Path,
                            title: str | None = None) -> Path | None:
    """Counted FLOPs / cost the paper's way: ours (of this device's matmul rate) and the paper's (of a P100's)."""
    t2 = load_tables()["table2"]
    bars = [(f"{r['row']} (ours, {r['device'] or '?'})", 100 * r["implied_utilization"], "C0")
            for r in table.to_dict("records") if pd.notna(r["implied_utilization"])]
    bars += [(f"{c['model']}\n(paper, {t2['training'][c['model']].get('gpu', '?')})", 100 * c["implied_utilization"],
              "C1") for c in costs]
    if not any(colour == "C0" for _, _, colour in bars):
        return None                    # none of ours: the paper's bars alone say nothing of this study
    fig = Figure(figsize=(max(6, 1.6 * len(bars)), 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(range(len(bars)), [b[1] for b in bars], color=[b[2] for b in bars])
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    for i, (_, v, _) in enumerate(bars):
        ax.annotate(f"{v:.1f} %", (i, v), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set(ylabel="counted FLOPs / cost the paper's way (%)",
           title=f"{title or study}: implied utilization of the assumed rate (ours: this device's matmul rate)")
    return save_png(fig, path)


def write_table2(study: str, results: dict, uri: str, out_dir: Path) -> list[Path]:
    # The paper rows' counted costs come from the study's parent run (the runner counts them: a report
    # never imports the model); a store written before they were logged shows none.
    costs = json.loads(results["parent"]["tags"].get("paper_costs") or "[]")
    table = summarize_table2(results["runs"], declared_rows(results["parent"]))
    title = plot_title(study, results["runs"])
    plots = [plot_table2_bleu_vs_cost(study, table, out_dir / f"{study}_bleu_vs_cost.png", title),
             plot_table2_utilization(study, table, costs, out_dir / f"{study}_utilization.png", title)]
    lines = render_table2(study, results, table, costs)
    # The families side by side: the rows of one language pair (the rivals train EN-DE), each section with its plot
    en_de = [r["row"] for r in table.to_dict("records") if r["pair"] == PAIRS["en_de"]]
    lines += ["", *architecture_section(results["runs"], table["row"].tolist())]
    # the measurements the rows took (harness/measure: the BLEU curve against compute, the agreement contrasts)
    measured, extra = measurement_sections(results["runs"], en_de, uri, out_dir, study)
    lines += measured
    return write_files(study, out_dir, lines, table, plots,
                       claims_section(study, results["runs"], uri, results["parent"])) + extra
