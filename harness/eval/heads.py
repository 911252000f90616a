"""What the attention heads of a trained encoder-decoder do, measured: the paper's Figures 3-5 turned into numbers.

The paper's appendix shows heads of the encoder's fifth layer that follow a long-distance dependency (Figure 3),
resolve anaphora (Figure 4) and mirror the sentence's structure (Figure 5). Later work measured this:

- **Head scores** (Clark et al. 2019, "What does BERT look at?"): for a gold relation between words, the share
  of its dependents whose most-attended other word is the gold one, per head, beside the best fixed-offset
  baseline (always predicting the word k places away, the best k). The relations come from the made-up
  corpus's gold trees (harness/eval/relations.py): a verb -> its subject (and, far apart, the long-distance
  agreement), a relative pronoun -> its antecedent, a word -> its syntactic head. Token attention becomes word
  attention as Clark et al. make it: attention *to* a word is the sum over its pieces, attention *from* a word
  the mean over its pieces; the source's EOS is no word, and a word's attention to itself is not a prediction.
- **Ablation** (Michel et al. 2019; Voita et al. 2019): each head's output masked at test time (its d_v
  columns of Concat(head_1..head_h) zeroed before W^O), the change in dev ln PPL, BLEU and the agreement
  contrasts' accuracy; then the encoder's heads masked cumulatively, least important first, on other dev
  sentences: BLEU against heads kept (Voita et al.'s curve).
- **Attention against causality** (Jain and Wallace 2019; Wiegreffe and Pinter 2019): the rank correlation
  between a head's relation score and how much masking it hurts, with W&P's uniform baseline beside it: the
  head's attention replaced by uniform attention over its keys (its values kept), the change that makes.

Decoding under ablation is greedy (`beam` 1 by default): a probe makes over a hundred decodes of the same
sentences, and it compares heads with each other, not with the paper's BLEU.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Iterable, NamedTuple

import torch

from harness.data.batching import ParallelData
from harness.data.bpe import EOS, PAD, Tokenizer
from harness.data.corpus import corpus_dir
from harness.errors import UserError
from harness.eval.agreement import LONG_FROM, contrastive_pairs, score_pairs
from harness.eval.bleu import tokenized_bleu
from harness.eval.evaluate import perplexity, translate
from harness.eval.relations import RELATIONS, relations
from harness.eval.source_attention import _Recorder, attention_logits
from model.attention import MultiHeadAttention

KINDS = ("enc", "dec", "cross")         # encoder self-attention, decoder self-attention, decoder-encoder attention
MAX_OFFSET = 12                         # the fixed-offset baseline tries every k in -12..12 but 0
PRUNE_TOLERANCE = 1.0                   # "a small loss": at most 1 BLEU (tokenized) below the unmasked model
CURVE_POINTS = 25                       # at most this many points on the all-heads pruning curve


class Head(NamedTuple):
    kind: str       # enc | dec | cross
    layer: int      # from 0 at the input
    head: int       # from 0

    @property
    def label(self) -> str:
        return f"{self.kind} L{self.layer + 1} H{self.head + 1}"


def attention_layers(model) -> list[tuple[str, int, MultiHeadAttention]]:
    """(kind, layer, the attention module) of an encoder-decoder, encoder first, then each decoder layer's self-
    and cross-attention."""
    if getattr(model.cfg, "family", "transformer") != "transformer":
        raise UserError(f"the heads probe reads the Transformer's encoder and decoder heads; this run's model is "
                        f"the {model.cfg.family} family.")
    out = [("enc", i, layer.self_attn.sublayer) for i, layer in enumerate(model.encoder.layers)]
    for i, layer in enumerate(model.decoder.layers):
        out += [("dec", i, layer.self_attn.sublayer), ("cross", i, layer.cross_attn.sublayer)]
    return out


def all_heads(model) -> list[Head]:
    layers = attention_layers(model)
    return [Head(k, i, h) for kind in KINDS for k, i, attn in layers if k == kind for h in range(attn.n_heads)]


class HeadMask(contextlib.AbstractContextManager):
    """Masks heads at test time: head_i's d_v columns of Concat(head_1..head_h) are multiplied by 0 before W^O
    (every other column by 1, which leaves a float exactly as it was). A forward pre-hook on each attention
    layer's W^O, removed on exit."""

    def __init__(self, model, masked: Iterable[Head] = ()):
        masked = set(masked)
        self.handles = []
        for kind, i, attn in attention_layers(model):
            w = attn.out_proj.weight
            gate = torch.ones(attn.n_heads, attn.d_v, dtype=w.dtype, device=w.device)
            for h in range(attn.n_heads):
                if Head(kind, i, h) in masked:
                    gate[h] = 0.0
            gate = gate.reshape(-1)
            self.handles.append(attn.out_proj.register_forward_pre_hook(
                lambda module, args, g=gate: (args[0] * g.to(args[0].dtype),) + tuple(args[1:])))

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()


class UniformHeads(contextlib.AbstractContextManager):
    """Wiegreffe and Pinter's uniform baseline: chosen encoder heads attend uniformly over their allowed keys
    (their values and W^O kept). A forward hook on each encoder self-attention layer adds, for each chosen head,
    (uniform_i - head_i) W^O_i to the layer's output, head_i recomputed from the layer's own input."""

    def __init__(self, model, heads: Iterable[Head]):
        by_layer: dict[int, list[int]] = {}
        for hd in heads:
            if hd.kind != "enc":
                raise ValueError(f"uniform attention replaces encoder heads only, not {hd.label}")
            by_layer.setdefault(hd.layer, []).append(hd.head)
        self.handles = []
        for kind, i, attn in attention_layers(model):
            if kind == "enc" and i in by_layer:
                self.handles.append(attn.register_forward_hook(self._hook(by_layer[i]), with_kwargs=True))

    @staticmethod
    def _hook(heads: list[int]):
        def hook(attn, args, kwargs, output):
            x = args[0] if args else kwargs["x"]
            logits, _, allowed, v = attention_logits(attn, x, mask=kwargs.get("mask"))
            probs = logits.softmax(-1)
            uniform = allowed[:, 0].to(v.dtype)
            uniform = uniform / uniform.sum(-1, keepdim=True)                         # (B or 1, T, S)
            w = attn.out_proj.weight
            for h in heads:
                change = (uniform - probs[:, h]) @ v[:, h]                           # (B, T, d_v)
                output = output + change @ w[:, h * attn.d_v:(h + 1) * attn.d_v].T
            return output
        return hook

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()


def word_index(tokenizer: Tokenizer, ids: list[int], n_words: int) -> list[int] | None:
    """The word each piece of an encoded sentence belongs to (sentencepiece marks a word's first piece with
    U+2581), or None where the pieces do not make n_words words."""
    out, w = [], -1
    for i in ids:
        if tokenizer.sp.id_to_piece(i).startswith("\u2581") or w < 0:
            w += 1
        out.append(w)
    return out if w + 1 == n_words else None


@torch.no_grad()
def encoder_word_attention(model, tokenizer: Tokenizer, sentences: list[str], device: torch.device,
                           batch: int = 64) -> list[torch.Tensor | None]:
    """Per sentence, the encoder's word-to-word attention (L, h, n, n) (from word i, row; to word j, column), or
    None where its pieces do not make its words."""
    model.eval()
    layers = [attn for kind, _, attn in attention_layers(model) if kind == "enc"]
    ids = tokenizer.encode(sentences)
    words = [word_index(tokenizer, s, len(text.split())) for s, text in zip(ids, sentences)]
    out: list[torch.Tensor | None] = [None] * len(sentences)
    for start in range(0, len(sentences), batch):
        rows = list(range(start, min(start + batch, len(sentences))))
        S = max(len(ids[r]) for r in rows) + 1
        src = torch.full((len(rows), S), PAD, dtype=torch.long)
        for b, r in enumerate(rows):
            src[b, :len(ids[r]) + 1] = torch.tensor(ids[r] + [EOS])
        rec = _Recorder(layers)
        try:
            model.encode(src.to(device))
        finally:
            rec.close()
        probs = [attention_logits(attn, x, mask=kw.get("mask"))[0].softmax(-1).float().cpu()
                 for attn, x, kw, _ in rec.calls]                                    # L x (B, h, S, S)
        for b, r in enumerate(rows):
            if words[r] is None:
                continue
            n_p, n_w = len(ids[r]), words[r][-1] + 1
            member = torch.zeros(n_w, n_p)
            member[torch.tensor(words[r]), torch.arange(n_p)] = 1.0
            mean_from = member / member.sum(1, keepdim=True)
            out[r] = torch.stack([mean_from @ p[b, :, :n_p, :n_p] @ member.T for p in probs])   # (L, h, n, n)
    return out


def predictions(word_maps: torch.Tensor) -> torch.Tensor:
    """The most-attended other word of every word, per head: (L, h, n)."""
    n = word_maps.size(-1)
    return word_maps.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).argmax(-1)


def instances(rels, relation: str, long_only: bool = False) -> list[tuple[int, int]]:
    pairs = getattr(rels, relation)
    return [(i, g) for i, g in pairs if not long_only or abs(i - g) >= LONG_FROM]


SCORED = RELATIONS + ("subject_long",)      # subject_long: verb -> subject at least LONG_FROM words apart


def head_scores(maps: list[torch.Tensor | None], rels: list) -> dict[str, dict]:
    """Per relation of SCORED: n (instances), scores (L x h, % of instances whose most-attended other word is
    the gold one), the best fixed offset k and its score (%), and chance (%, a head attending uniformly: 1 in
    the sentence's other words)."""
    preds = [predictions(m) if m is not None else None for m in maps]
    out = {}
    for name in SCORED:
        relation, long_only = ("subject", True) if name == "subject_long" else (name, False)
        hits, n, chance, offsets = None, 0, 0.0, {}
        for pred, rel in zip(preds, rels):
            found = instances(rel, relation, long_only) if pred is not None else []
            if not found:
                continue
            dep, gold = torch.tensor([i for i, _ in found]), torch.tensor([g for _, g in found])
            h = (pred[:, :, dep] == gold).sum(-1)
            hits = h if hits is None else hits + h
            n += len(found)
            chance += len(found) / (len(rel.words) - 1)
            for i, g in found:
                if 0 < abs(g - i) <= MAX_OFFSET:
                    offsets[g - i] = offsets.get(g - i, 0) + 1
        k, best = max(offsets.items(), key=lambda kv: (kv[1], -abs(kv[0]), kv[0])) if offsets else (0, 0)
        out[name] = {"n": n, "scores": (100.0 * hits / n).tolist() if n else [], "offset": k,
                     "offset_score": 100.0 * best / n if n else float("nan"),
                     "chance": 100.0 * chance / n if n else float("nan")}
    return out


class Measured(NamedTuple):
    nll: float          # dev ln PPL, teacher-forced
    bleu: float         # tokenized BLEU of the decodes
    agree: float        # agreement contrasts' accuracy, % (NaN where not measured)


class Scorer:
    """The probe's figures for the model as it is now (with whatever heads are masked): on the `rank` sentences
    (the single-head ablations) or the `curve` sentences (the pruning curves), two disjoint halves of the dev
    sentences probed."""

    def __init__(self, model, tokenizer: Tokenizer, split, n: int, pairs, device: torch.device, *, beam: int,
                 max_extra: int, max_tokens: int, lang: str, moses: str):
        self.model, self.tokenizer, self.pairs, self.device = model, tokenizer, pairs, device
        self.beam, self.max_extra, self.max_tokens, self.lang, self.moses = beam, max_extra, max_tokens, lang, moses
        half = n // 2
        data = split.data
        self.sets = {name: (ParallelData(data.src_ids[a:b], data.tgt_ids[a:b]), split.tgt_text[a:b])
                     for name, a, b in (("rank", 0, half), ("curve", half, n))}
        self.calls = 0

    def __call__(self, which: str, agreement: bool = True) -> Measured:
        self.calls += 1
        data, refs = self.sets[which]
        none = contextlib.nullcontext
        nll = math.log(perplexity(self.model, data, self.max_tokens, self.device, none))
        hyps = translate(self.model, self.tokenizer, data, self.device, self.beam, 0.6 if self.beam > 1 else 0.0,
                         self.max_extra, self.max_tokens, none)
        bleu = tokenized_bleu(hyps, refs, lang=self.lang, moses=self.moses).score
        agree = float("nan")
        if agreement and self.pairs:
            _, correct = score_pairs(self.model, self.tokenizer, self.pairs, self.device, self.max_tokens, none,
                                     self.model.cfg.max_len)
            agree = 100.0 * sum(correct) / max(len(correct), 1)
        return Measured(nll, bleu, agree)


def ablations(model, scorer: Scorer, heads: list[Head]) -> tuple[Measured, dict[Head, Measured], dict[Head, Measured]]:
    """The unmasked model, each head masked alone, and each encoder head made uniform alone, on `rank`."""
    base = scorer("rank")
    zeroed, uniform = {}, {}
    for hd in heads:
        with HeadMask(model, [hd]):
            zeroed[hd] = scorer("rank")
        if hd.kind == "enc":
            with UniformHeads(model, [hd]):
                uniform[hd] = scorer("rank")
    return base, zeroed, uniform


def pruning_curve(model, scorer: Scorer, order: list[Head], points: list[int]) -> list[dict]:
    """BLEU and ln PPL on `curve` with the first k heads of `order` masked, for each k of points."""
    out = []
    for k in points:
        with HeadMask(model, order[:k]):
            m = scorer("curve", agreement=False)
        out.append({"masked": k, "kept": len(order) - k, "nll": m.nll, "bleu": m.bleu})
    return out


def prunable(curve: list[dict], n_heads: int, tolerance: float = PRUNE_TOLERANCE) -> float:
    """The share of heads masked (least important first) before BLEU first falls more than `tolerance` below
    the unmasked model's."""
    base, last = curve[0]["bleu"], 0
    for point in curve:
        if point["bleu"] < base - tolerance:
            break
        last = point["masked"]
    return last / n_heads


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0          # ties share their mean rank
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (ties at their mean rank); NaN where either side is constant."""
    keep = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    if len(keep) < 3:
        return float("nan")
    rx, ry = _ranks([x for x, _ in keep]), _ranks([y for _, y in keep])
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def relation_gains(scores: dict[str, dict], n_layers: int, n_heads: int) -> list[float]:
    """Per encoder head (layer-major), its best score over the three relations above that relation's best fixed
    offset (percentage points): how far the head tracks some relation beyond what position alone gives."""
    gains = [float("-inf")] * (n_layers * n_heads)
    for name in RELATIONS:
        s = scores[name]
        if not s["n"]:
            continue
        for l in range(n_layers):
            for h in range(n_heads):
                gains[l * n_heads + h] = max(gains[l * n_heads + h], s["scores"][l][h] - s["offset_score"])
    return [g if math.isfinite(g) else float("nan") for g in gains]


def _best(scores: list[list[float]], layer: int | None = None) -> list[tuple[float, int, int]]:
    """(score, layer, head), best first; within one layer where given."""
    out = [(s, l, h) for l, row in enumerate(scores) for h, s in enumerate(row) if layer is None or l == layer]
    return sorted(out, key=lambda t: (-t[0], t[1], t[2]))


def figure_sentences(maps: list, rels: list, scores: dict[str, dict]) -> dict:
    """The sentences and heads the paper's three figures are redrawn with, chosen by rule from the probed ones:
    - fig3 (long-distance dependency): the longest sentence with the farthest verb -> subject pair; the word is
      that verb; every head of the layer that holds the best head on long-distance subjects (else on subjects);
    - fig4 (anaphora; here a relative pronoun and its antecedent): the longest sentence with a relative pronoun;
      the two best antecedent heads of the layer holding the best one, all their attention and the pronoun's;
    - fig5 (structure): the same sentence (the paper's Figures 4 and 5 share theirs, else fig3's); the two best
      heads on the word -> syntactic head relation, of the layer holding the best one."""
    def longest(relation: str, long_only: bool):
        found = [(len(r.words), -k, k) for k, (m, r) in enumerate(zip(maps, rels))
                 if m is not None and instances(r, relation, long_only)]
        return max(found)[2] if found else None

    def layer_heads(name: str, count: int | None):
        best = _best(scores[name]["scores"])
        layer = best[0][1]
        heads = [h for _, _, h in _best(scores[name]["scores"], layer)]
        return layer, (heads[:count] if count else sorted(heads))

    def panel(k: int, layer: int, heads: list[int], word: int | None, relation: str) -> dict:
        return {"sentence": k, "words": rels[k].words, "layer": layer, "heads": heads, "word": word,
                "relation": relation, "maps": [[[round(float(p), 4) for p in row] for row in maps[k][layer, h]]
                                               for h in heads]}

    out = {}
    k3 = longest("subject", True)
    name3 = "subject_long" if k3 is not None else "subject"
    k3 = k3 if k3 is not None else longest("subject", False)
    if k3 is not None and scores[name3]["n"]:
        verb = max(instances(rels[k3], "subject"), key=lambda p: (abs(p[0] - p[1]), p[0]))[0]
        layer, heads = layer_heads(name3, None)
        out["fig3"] = panel(k3, layer, heads, verb, name3)
    k4 = longest("antecedent", False)
    if k4 is not None and scores["antecedent"]["n"]:
        layer, heads = layer_heads("antecedent", 2)
        out["fig4"] = panel(k4, layer, heads, instances(rels[k4], "antecedent")[0][0], "antecedent")
    k5 = k4 if k4 is not None else k3
    if k5 is not None and scores["head"]["n"]:
        layer, heads = layer_heads("head", 2)
        out["fig5"] = panel(k5, layer, heads, None, "head")
    return out


def heads_probe(model, tokenizer: Tokenizer, split, trees: list[str], data_cfg, device: torch.device, *,
                sentences: int, contrast_sentences: int = 200, beam: int = 1, max_extra: int = 20,
                max_tokens: int = 4000, lang: str = "de", moses: str = "2025") -> tuple[dict, dict]:
    """The whole probe on a trained encoder-decoder and the first `sentences` of its dev split (with their gold
    trees): (metrics for MLflow, the payload heads.json keeps: per head scores and ablations, the curves, the
    figures' attention)."""
    t0 = time.perf_counter()
    n = min(sentences, len(split.src_text), len(trees))
    if n < 4:
        raise UserError(f"the heads probe needs at least 4 dev sentences with gold trees; it found {n}.")
    model.eval()
    rels = [relations(t) for t in trees[:n]]
    for k, r in enumerate(rels):
        if r.words != split.src_text[k].split():
            raise UserError(f"dev sentence {k + 1}'s gold tree does not hold its words; the heads probe reads the "
                            "made-up corpus's dev.src and dev.tree, written together.")
    rank = n // 2                                   # scores, figures and single-head ablations: the first half
    maps = encoder_word_attention(model, tokenizer, split.src_text[:rank], device)
    scores = head_scores(maps, rels[:rank])
    enc = [a for kind, _, a in attention_layers(model) if kind == "enc"]
    L, H = len(enc), enc[0].n_heads
    pairs = contrastive_pairs(data_cfg, contrast_sentences) if contrast_sentences else []
    scorer = Scorer(model, tokenizer, split, n, pairs, device, beam=beam, max_extra=max_extra,
                    max_tokens=max_tokens, lang=lang, moses=moses)
    heads = all_heads(model)
    base, zeroed, uniform = ablations(model, scorer, heads)
    importance = {hd: zeroed[hd].nll - base.nll for hd in heads}
    enc_order = sorted((hd for hd in heads if hd.kind == "enc"), key=lambda hd: (importance[hd], hd))
    all_order = sorted(heads, key=lambda hd: (importance[hd], hd))
    step = max(1, math.ceil(len(all_order) / (CURVE_POINTS - 1)))
    curves = {"enc": pruning_curve(model, scorer, enc_order, list(range(len(enc_order) + 1))),
              "all": pruning_curve(model, scorer, all_order, sorted(set(range(0, len(all_order), step)) |
                                                                   {len(all_order)}))}
    gains = relation_gains(scores, L, H)
    enc_heads = [hd for hd in heads if hd.kind == "enc"]
    rho_zero = spearman(gains, [importance[hd] for hd in enc_heads])
    rho_uniform = spearman(gains, [uniform[hd].nll - base.nll for hd in enc_heads])
    payload = {"sentences": n, "rank_sentences": rank, "agreement_pairs": len(pairs), "beam": beam,
               "tolerance": PRUNE_TOLERANCE, "layers": L, "heads_per_layer": H, "scores": scores,
               "base": base._asdict(), "gains": gains,
               "heads": [{"label": hd.label, **hd._asdict(), "zeroed": zeroed[hd]._asdict(),
                          "uniform": uniform[hd]._asdict() if hd in uniform else None} for hd in heads],
               "curves": curves, "rho_zero": rho_zero, "rho_uniform": rho_uniform,
               "figures": figure_sentences(maps, rels[:rank], scores)}
    metrics = probe_metrics(payload)
    metrics["heads_seconds"] = payload["seconds"] = time.perf_counter() - t0
    payload["evaluations"] = scorer.calls
    return metrics, payload


def probe_metrics(payload: dict) -> dict[str, float]:
    """The probe's headline figures, as MLflow metrics: per relation the best head's score, the best fixed
    offset's and the gain between them; the shares of heads prunable within the tolerance; the correlations."""
    out: dict[str, float] = {"heads_base_nll": payload["base"]["nll"],
                             "heads_base_bleu": payload["base"]["bleu"], "heads_base_agree": payload["base"]["agree"]}
    for name, s in payload["scores"].items():
        best = max((v for row in s["scores"] for v in row), default=float("nan"))
        out.update({f"heads_{name}_n": s["n"], f"heads_{name}_best": best, f"heads_{name}_offset": s["offset_score"],
                    f"heads_{name}_gain": best - s["offset_score"], f"heads_{name}_chance": s["chance"]})
    for name, curve in payload["curves"].items():
        count = curve[-1]["masked"]
        out[f"heads_prunable_{name}"] = prunable(curve, count)
    out["heads_rho_zero"], out["heads_rho_uniform"] = payload["rho_zero"], payload["rho_uniform"]
    return out


def check_heads_data(data_cfg) -> None:
    if data_cfg.name != "synth" or data_cfg.task != "translate":
        raise UserError(f"the heads probe needs the made-up corpus's translation task (data.name synth), not "
                        f"{data_cfg.name!r} ({data_cfg.task}): its relations come from the corpus's gold trees.")


def dev_trees(data_cfg) -> list[str]:
    """The gold trees of the made-up corpus's dev sentences, one a line, in dev.src's order."""
    check_heads_data(data_cfg)
    path = corpus_dir(data_cfg) / "dev.tree"
    if not path.is_file():
        raise UserError(f"{path}: no gold trees beside the dev sentences; prepare the corpus again "
                        "(`python -m harness data prepare synth`).")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
