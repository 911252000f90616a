"""The probe streams, drawn from random streams train, dev and test never use: the agreement contrasts (§4)
and sentences by source length (§3.5)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from harness.data.synth.config import MAX_PAIRS, SynthConfig
from harness.data.synth.grammar import Marked
from harness.data.synth.sentences import _check_cfg, _check_int, _sentences

# ------------------------------------------------------------------------------- agreement contrasts
PROBE_STREAM = 3   # the random stream of the contrastive sentences: none of train, dev and test (0, 1, 2)


class Contrast(NamedTuple):
    """A contrastive pair (Sennrich 2017's Lingeval97 way): the reference, and the reference with one word that
    agrees with its subject given a form that breaks the agreement."""
    src: str
    ref: str
    alt: str
    distance: int       # target words from the controller (the subject's head, or the antecedent) to the word
    feature: str        # what the changed form gets wrong: number | gender (the German-like target's verbs)


def agreement_pairs(n_sentences: int, seed: int, cfg: SynthConfig = SynthConfig(), *,
                    stream: int = PROBE_STREAM) -> list[Contrast]:
    """The contrastive pairs of sentences 0..n_sentences-1 of `stream` (the corpus's own grammar and lexicon;
    a stream of their own, so none of them is a training, dev or test pair by construction): for every verb
    that agrees with a single controller (a coordinated subject has none), one pair per feature it agrees in.
    A controller lost to the French-like target's elision (qu'il) takes its pairs with it."""
    _check_int("the number of sentences", n_sentences, 1, MAX_PAIRS)
    _check_int("the seed", seed, 0)
    _check_cfg(cfg)
    out = []
    for src, _, tgt in _sentences(n_sentences, seed, stream, cfg, annotate=True):
        out += _contrasts(src, tgt)
    return out


def _contrasts(src: list, tgt: list) -> list[Contrast]:
    """The contrastive pairs of one annotated sentence (`agreement_pairs`)."""
    at = {id(t): k for k, t in enumerate(tgt) if isinstance(t, Marked)}
    src_text, ref = " ".join(src), " ".join(tgt)
    out = []
    for k, word in enumerate(tgt):
        if isinstance(word, Marked) and word.alternatives and id(word.controller) in at:
            for feature, form in word.alternatives:
                alt = " ".join(tgt[:k] + [form] + tgt[k + 1:])
                out.append(Contrast(src_text, ref, alt, k - at[id(word.controller)], feature))
    return out


# ------------------------------------------------------------------------------- sentences by length
LENGTH_STREAM = 4   # the random stream of the length buckets (§3.5): none of train, dev, test and the contrasts
FINETUNE_STREAM = 5  # the long sentences a RoPE model is fine-tuned on (position interpolation): none of the above
MAX_LENGTH_DRAWS = 1_000_000


class LengthBucket(NamedTuple):
    """Sentences of one source length range (words, the final "." included) and their agreement contrasts."""
    lo: int
    hi: int
    src: list[str]
    tgt: list[str]
    contrasts: list[Contrast]


def length_buckets(per_bucket: int, seed: int, cfg: SynthConfig, bounds: list[tuple[int, int]],
                   stream: int = LENGTH_STREAM) -> list[LengthBucket]:
    """per_bucket sentences of each (lo, hi) word range of `bounds`, from the corpus's own grammar and lexicon
    drawn up to the longest bound (cfg.max_len is replaced by hi + 1), in the order of a stream none of the
    splits uses: a sentence goes to the first range it falls in that is not yet full. Ranges the grammar cannot
    fill within MAX_LENGTH_DRAWS draws keep what they got."""
    _check_int("sentences per bucket", per_bucket, 1, MAX_PAIRS)
    _check_int("the seed", seed, 0)
    top = max(hi for _, hi in bounds)
    cfg = dataclasses.replace(cfg, max_len=top + 1)
    _check_cfg(cfg)
    buckets = [LengthBucket(lo, hi, [], [], []) for lo, hi in bounds]
    open_ = len(buckets)
    for src, _, tgt in _sentences(MAX_LENGTH_DRAWS, seed, stream, cfg, annotate=True):
        bucket = next((b for b in buckets if b.lo <= len(src) <= b.hi and len(b.src) < per_bucket), None)
        if bucket is None:
            continue
        bucket.src.append(" ".join(src))
        bucket.tgt.append(" ".join(tgt))
        bucket.contrasts.extend(_contrasts(src, tgt))
        if len(bucket.src) == per_bucket:
            open_ -= 1
            if not open_:
                break
    return buckets
