"""The heads probe in a study's report (harness/eval/heads.py; each trial's heads.json artifact and heads_*
metrics): the paper's Figures 3-5 redrawn from a trained model, the heads scored against gold relations beside the
fixed-offset baseline, each head masked, the pruning curves, and attention against causality. Plain pandas and
matplotlib: reads MLflow's runs only. The figure drawing is shared with `python -m harness probe heads`."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness import logged
from harness.report.cells import interval_cell, md_table
from harness.report.curves import plot_title
from harness.report.files import save_png

RELATION_NAMES = {"subject": "verb → its subject", "subject_long": "verb → its subject, ≥ 4 words apart",
                  "antecedent": "relative pronoun → its antecedent", "head": "word → its syntactic head"}


def _label(layer: int, head: int) -> str:
    return f"L{layer + 1} H{head + 1}"


def draw_lines(ax, words: list[str], maps: list, heads: list[int], word: int | None = None) -> None:
    """The paper's line drawing (its Figures 3-5, after tensor2tensor's): the sentence along the top (from) and
    again along the bottom (to), a line from word i to word j as opaque as head h's attention p_ij, a colour
    per head; only the lines from `word` where one is given. Several heads' lines from one word end side by side
    under their word (a fan 0.6 of a word wide, in head order), not on one point: drawn over each other, eight
    translucent colours blended into greys no legend entry matched."""
    n = len(words)
    fan = 0.6 / len(heads) if word is not None and len(heads) > 1 else 0.0
    for k, (h, m) in enumerate(zip(heads, maps)):
        color, shift = f"C{h % 10}", (k - (len(heads) - 1) / 2) * fan
        for i in (range(n) if word is None else [word]):
            for j in range(n):
                if m[i][j] > 0.02:
                    ax.plot([i, j + shift], [1, 0], color=color, alpha=min(1.0, float(m[i][j])),
                            lw=2.0 if word is not None else 1.2)
    for i, w in enumerate(words):
        weight = "bold" if i == word else "normal"
        ax.text(i, 1.04, w, rotation=90, ha="center", va="bottom", fontsize=8, fontweight=weight)
        ax.text(i, -0.04, w, rotation=90, ha="center", va="top", fontsize=8)
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(-0.9, 1.9)
    ax.axis("off")
    if len(heads) > 1 or word is not None:
        for h in heads:
            ax.plot([], [], color=f"C{h % 10}", lw=3, label=f"head {h + 1}")
        ax.legend(loc="upper right", fontsize=7, ncol=min(len(heads), 8), frameon=False, bbox_to_anchor=(1.0, 1.0))


def draw_figures(figures: dict, out_dir: Path, stem: str = "heads", title: str | None = None) -> list[Path]:
    """Figures 3, 4 and 5 as the paper draws them, and the same heads' attention as heatmaps: PNGs in out_dir, each
    under `title` (the study, profile and seed) where one is given."""
    paths = []

    def save(fig: Figure, name: str) -> None:
        if title:
            fig.suptitle(title, fontsize=10)
        paths.append(save_png(fig, out_dir / f"{stem}_{name}.png"))
    f3, f4, f5 = (figures.get(k) for k in ("fig3", "fig4", "fig5"))
    if f3:
        fig = Figure(figsize=(max(6, 0.55 * len(f3["words"])), 4.2), layout="constrained")
        ax = fig.subplots()
        draw_lines(ax, f3["words"], f3["maps"], f3["heads"], f3["word"])
        ax.set_title(f"Figure 3: encoder self-attention in layer {f3['layer'] + 1}, every head, from "
                     f"\"{f3['words'][f3['word']]}\" only", fontsize=9)
        save(fig, "figure3")
    if f4:
        fig = Figure(figsize=(max(6, 0.55 * len(f4["words"])) * 2, 4.2), layout="constrained")
        top, bottom = fig.subplots(1, 2)
        draw_lines(top, f4["words"], f4["maps"][:1], f4["heads"][:1])
        top.set_title(f"Figure 4 (left): layer {f4['layer'] + 1}, head {f4['heads'][0] + 1}, all its attention",
                      fontsize=9)
        draw_lines(bottom, f4["words"], f4["maps"], f4["heads"], f4["word"])
        bottom.set_title(f"(right): heads {' and '.join(str(h + 1) for h in f4['heads'])}, from "
                         f"\"{f4['words'][f4['word']]}\" only (relative pronoun → antecedent)", fontsize=9)
        save(fig, "figure4")
    if f5:
        fig = Figure(figsize=(max(6, 0.55 * len(f5["words"])) * len(f5["heads"]), 4.2), layout="constrained")
        axes = fig.subplots(1, len(f5["heads"]), squeeze=False)[0]
        for ax, h, m in zip(axes, f5["heads"], f5["maps"]):
            draw_lines(ax, f5["words"], [m], [h])
            ax.set_title(f"Figure 5: layer {f5['layer'] + 1}, head {h + 1} (best on word → syntactic head)", fontsize=9)
        save(fig, "figure5")
    panels = [(f"Fig. {k[-1]}, L{f['layer'] + 1} H{h + 1}", f["words"], m)
              for k, f in (("fig3", f3), ("fig4", f4), ("fig5", f5)) if f
              for h, m in list(zip(f["heads"], f["maps"]))[:2 if k == "fig3" else None]]
    if panels:      # three to a row: six in one row drew each word in 6-point type on a page-wide strip
        cols = min(3, len(panels))
        fig = Figure(figsize=(4.4 * cols, 4.4 * math.ceil(len(panels) / cols)), layout="constrained")
        axes = fig.subplots(math.ceil(len(panels) / cols), cols, squeeze=False).ravel()
        for ax, (name, words, m) in zip(axes, panels):
            top = max(max(row) for row in m)          # each panel to its own largest probability (its colour bar)
            image = ax.imshow(m, cmap="Blues", vmin=0, vmax=top)
            fig.colorbar(image, ax=ax, shrink=0.8)
            ax.set_xticks(range(len(words)), words, rotation=90, fontsize=8)
            ax.set_yticks(range(len(words)), words, fontsize=8)
            ax.set_title(name, fontsize=9)
        for ax in axes[len(panels):]:
            ax.set_axis_off()
        save(fig, "heatmaps")
    return paths


def _payloads(runs: pd.DataFrame, uri: str) -> list[tuple[int, dict]]:
    """(seed, heads.json) of every finished trial that ran the probe, by seed; each payload with the run's own
    shares of heads prunable (`prunable`: enc, all; the heads_prunable_* metrics the probe computed)."""
    if "metrics.heads_base_nll" not in runs:
        return []
    done = runs[(runs["status"] == "FINISHED") & runs["metrics.heads_base_nll"].notna()]
    out = []
    for _, run in done.iterrows():
        payload = logged.artifact_json(uri, run["run_id"], "heads.json")
        if payload is not None:
            payload["prunable"] = {name: float(run.get(f"metrics.heads_prunable_{name}", float("nan")))
                                   for name in ("enc", "all")}
            out.append((int(run["tags.seed"]), payload))
    return sorted(out, key=lambda t: t[0])


def _scores_table(payloads: list[tuple[int, dict]]) -> list[str]:
    """Per relation, over seeds: the best encoder head's score, the best fixed offset's, their gap, chance."""
    body = []
    for name, label in RELATION_NAMES.items():
        per = [p["scores"][name] for _, p in payloads if p["scores"][name]["n"]]
        if not per:
            continue
        best = [max(v for row in s["scores"] for v in row) for s in per]
        where = []
        for s in per:
            b = max(((v, l, h) for l, row in enumerate(s["scores"]) for h, v in enumerate(row)), key=lambda t: t[0])
            where.append(_label(b[1], b[2]))
        offsets = sorted({s["offset"] for s in per})
        offset = [s["offset_score"] for s in per]
        body.append([label, f"{sum(s['n'] for s in per) / len(per):.0f}", interval_cell(best, "{:.1f}"),
                     ", ".join(where),
                     interval_cell(offset, "{:.1f}") + f" (k = {', '.join(f'{k:+d}' for k in offsets)})",
                     interval_cell([b - o for b, o in zip(best, offset)], "{:.1f}"),
                     interval_cell([s["chance"] for s in per], "{:.1f}")])
    return md_table(["relation", "instances a seed", "best head (%)", "best head, by seed", "best fixed offset (%)",
                     "best head − offset (points)", "uniform attention (%)"], body)


def _heads_table(payload: dict) -> list[str]:
    """One seed's encoder heads, least important first: their relation scores and what masking each does."""
    base, scores, H = payload["base"], payload["scores"], payload["heads_per_layer"]
    enc = [h for h in payload["heads"] if h["kind"] == "enc"]
    enc.sort(key=lambda h: (h["zeroed"]["nll"] - base["nll"], h["layer"], h["head"]))
    body = []
    for h in enc:
        l, k = h["layer"], h["head"]
        rel = [f"{scores[r]['scores'][l][k]:.0f}" if scores[r]["n"] else "–" for r in RELATION_NAMES]
        z, u = h["zeroed"], h["uniform"]
        body.append([_label(l, k), *rel, f"{payload['gains'][l * H + k]:+.1f}", f"{z['nll'] - base['nll']:+.4f}",
                     f"{z['bleu'] - base['bleu']:+.2f}",
                     "–" if math.isnan(z["agree"]) else f"{z['agree'] - base['agree']:+.1f}",
                     f"{u['nll'] - base['nll']:+.4f}" if u else "–"])
    return md_table(["head", "subject %", "subject ≥ 4 %", "antecedent %", "syntactic head %", "gain (points)",
                     "masked: Δ ln PPL", "Δ BLEU", "Δ agreement (points)", "uniform: Δ ln PPL"], body)


def _kinds_table(payloads: list[tuple[int, dict]]) -> list[str]:
    """Each kind of head masked alone, over every seed's heads: the mean and largest harm."""
    body = []
    for kind, name in (("enc", "encoder self-attention"), ("dec", "decoder self-attention"),
                       ("cross", "decoder-encoder attention")):
        d_nll = [h["zeroed"]["nll"] - p["base"]["nll"] for _, p in payloads for h in p["heads"] if h["kind"] == kind]
        d_bleu = [h["zeroed"]["bleu"] - p["base"]["bleu"] for _, p in payloads for h in p["heads"] if h["kind"] == kind]
        if d_nll:
            body.append([name, str(len(d_nll) // len(payloads)), f"{sum(d_nll) / len(d_nll):+.4f}",
                         f"{max(d_nll):+.4f}",
                         f"{sum(d_bleu) / len(d_bleu):+.2f}", f"{min(d_bleu):+.2f}"])
    return md_table(["heads", "a seed", "mean Δ ln PPL", "largest Δ ln PPL", "mean Δ BLEU", "largest BLEU loss"], body)


def _plot(payloads: list[tuple[int, dict]], path: Path, title: str) -> Path:
    """Left: BLEU against heads kept, masking least important first (Voita et al.'s curve), the encoder's heads
    and all heads, one line per seed. Right: each encoder head's relation gain against its masking's Δ ln PPL."""
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    for j, (seed, p) in enumerate(payloads):
        for name, style in (("enc", "-"), ("all", ":")):
            c = p["curves"][name]
            total = c[-1]["masked"]
            left.plot([pt["kept"] / total for pt in c], [pt["bleu"] for pt in c], style, marker="o", ms=3,
                      color=f"C{j}", label=f"seed {seed}, {'encoder heads' if name == 'enc' else 'all heads'}")
        enc = [h for h in p["heads"] if h["kind"] == "enc"]
        right.scatter(p["gains"], [h["zeroed"]["nll"] - p["base"]["nll"] for h in enc], s=14, color=f"C{j}",
                      label=f"seed {seed}: ρ = {p['rho_zero']:+.2f}")
    left.invert_xaxis()
    left.set_xlabel("share of heads kept")
    left.set_ylabel("BLEU (tokenized, greedy)")
    left.set_title("pruning, least important first", fontsize=9)
    left.legend(fontsize=7)
    right.axhline(0, color="0.7", lw=0.8)
    right.set_xlabel("best relation score − its fixed offset (points)")
    right.set_ylabel("Δ dev ln PPL, head masked")
    right.set_title("attention against causality (encoder heads)", fontsize=9)
    right.legend(fontsize=7)
    fig.suptitle(f"{title}: the heads masked, every seed", fontsize=10)
    return save_png(fig, path)


def heads_section(runs: pd.DataFrame, uri: str, out_dir: Path, stem: str, setting: str) -> tuple[list[str], list[Path]]:
    """The report's heads section (its images linked) and its PNGs, or ([], []) where no trial ran the probe;
    `setting`: the study setting that asks for the probe (harness/measure/heads.py)."""
    payloads = _payloads(runs, uri)
    if not payloads:
        return [], []
    first_seed, first = payloads[0]
    title = plot_title(stem, runs)
    figures = draw_figures(first["figures"], out_dir, stem, f"{title}, seed {first_seed}")
    plot = _plot(payloads, out_dir / f"{stem}_ablation.png", title)
    n, rank = first["sentences"], first["rank_sentences"]
    lines = ["## Attention heads (the paper's Figures 3-5, measured)", "",
             f"After training, each trial probed its heads on the first {n} dev sentences and their gold trees "
             f"(`{setting}`; harness/eval/heads.py). Scores, figures and single-head ablations use the "
             f"first {rank}; the pruning curves the other {n - rank}. Means over {len(payloads)} seeds ± half their "
             "95 % t-intervals; a head is named by its layer and number from 1 (heads are not the same across seeds).",
             "", "### Figures 3-5, redrawn", "",
             f"Seed {first_seed}'s model; sentence, word, layer and heads chosen by rule (harness/eval/heads.py "
             "`figure_sentences`): Figure 3, the longest probed sentence with the farthest verb → subject pair, every "
             "head of the layer holding the best head on that relation, from the verb only; Figure 4, the longest "
             "with a relative pronoun (the paper's anaphora: here the pronoun's antecedent), the layer's two best "
             "antecedent heads; Figure 5, the two best heads on word → syntactic head. Lines as opaque as the "
             "attention; the heatmaps show the same heads (rows: from, columns: to), each scaled to its largest "
             "probability (its colour bar).", ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures] + [""]
    lines += ["### Head scores against gold relations (Clark et al. 2019)", "",
              "A head's score on a relation: the share of the relation's dependents whose most-attended other word "
              "(word attention as Clark et al. make it: summed over the pieces of the word attended to, averaged "
              "over those of the word attending; the source's EOS excluded) is the gold word. Beside it, the best "
              "fixed offset (always the word k places away, the best k) and a head attending uniformly (1 in the "
              "sentence's other words).", ""] + _scores_table(payloads) + [""]
    lines += ["### Ablation: each head masked at test time", "",
              f"A head's output (its d_v columns before W^O) zeroed alone, on the first {rank} sentences: the change "
              f"in dev ln PPL, in tokenized BLEU of greedy decodes, and in the accuracy on "
              f"{first['agreement_pairs']} subject-verb agreement contrasts (harness/eval/agreement.py). "
              "\"uniform\": the head's attention replaced by uniform attention over its keys instead (Wiegreffe and "
              "Pinter 2019's baseline; encoder heads). Every kind of head:", ""] + _kinds_table(payloads) + [""]
    lines += [f"Seed {first_seed}'s encoder heads, least important (smallest Δ ln PPL) first; scores in %:", ""]
    lines += _heads_table(first) + [""]
    lines += _pruning_and_correlation(payloads) + [f"![{plot.stem}]({plot.name})", ""]
    return lines, [*figures, plot]


def _pruning_and_correlation(payloads: list[tuple[int, dict]]) -> list[str]:
    tol = payloads[0][1]["tolerance"]
    body = []
    for seed, p in payloads:
        enc, every = p["curves"]["enc"], p["curves"]["all"]
        body.append([str(seed), f"{enc[0]['bleu']:.2f}", f"{enc[-1]['bleu']:.2f}", f"{p['prunable']['enc']:.2f}",
                     f"{every[-1]['bleu']:.2f}", f"{p['prunable']['all']:.2f}", f"{p['rho_zero']:+.2f}",
                     f"{p['rho_uniform']:+.2f}"])
    rho = [p["rho_zero"] for _, p in payloads]
    rho_u = [p["rho_uniform"] for _, p in payloads]
    return ["### Pruning (Voita et al. 2019) and attention against causality", "",
            f"Heads masked cumulatively in order of their single-head Δ ln PPL (least first), scored on the other "
            f"half of the probed sentences: the share of heads masked before BLEU first falls more than {tol:g} "
            "below the unmasked model's. ρ: Spearman's rank correlation over the encoder's heads between a head's "
            "best relation gain (score − the relation's best fixed offset) and the Δ ln PPL of masking it; ρ uniform: "
            "the same against the Δ of making it attend uniformly.", ""] + md_table(
        ["seed", "BLEU, all heads", "BLEU, no encoder head", "encoder heads prunable", "BLEU, no head at all",
         "all heads prunable", "ρ (masked)", "ρ (uniform)"], body) + [
        "", f"Over seeds: ρ (masked) {interval_cell(rho, '{:+.2f}')}, "
            f"ρ (uniform) {interval_cell(rho_u, '{:+.2f}')}.", ""]
