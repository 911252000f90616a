"""Sentences from (seed, stream, i): each pair made by its own random.Random, so a corpus is a prefix of any
larger one with the same seed; the public generator `generate`."""

from __future__ import annotations

import random
from dataclasses import fields
from typing import Iterator

from harness.data.synth.config import MAX_PAIRS, Example, SynthConfig
from harness.data.synth.grammar import TARGETS, _Grammar
from harness.errors import UserError


# ------------------------------------------------------------------------------------------ public API
def _check_int(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        top = f" and at most {hi:,}" if hi is not None else ""
        raise UserError(f"{name} must be a whole number at least {lo}{top}, not {value!r}.")


def _check_cfg(cfg: SynthConfig) -> None:
    if not isinstance(cfg, SynthConfig):
        raise UserError(f"cfg must be a SynthConfig, not {type(cfg).__name__}.")
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if f.name.startswith("p_") and not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
            raise UserError(f"SynthConfig.{f.name} must be a probability between 0 and 1, not {v!r}.")
    for name in ("n_nouns", "n_verbs", "n_adjectives", "n_adverbs"):
        _check_int(f"SynthConfig.{name}", getattr(cfg, name), 10, 100_000)
    _check_int("SynthConfig.n_ambiguous", cfg.n_ambiguous, 0, min(cfg.n_nouns, cfg.n_verbs) // 4)
    _check_int("SynthConfig.max_depth", cfg.max_depth, 1, 8)
    _check_int("SynthConfig.max_len", cfg.max_len, 10)
    _check_int("SynthConfig.lexicon_seed", cfg.lexicon_seed, 0)
    if cfg.target not in TARGETS:
        raise UserError(f"SynthConfig.target must be one of {', '.join(TARGETS)} (the target language), "
                        f"not {cfg.target!r}.")
    if not (isinstance(cfg.zipf_s, (int, float)) and 0.0 <= cfg.zipf_s <= 3.0):
        raise UserError(f"SynthConfig.zipf_s must be between 0 and 3, not {cfg.zipf_s!r}.")


def _sentences(n: int, seed: int, stream: int, cfg: SynthConfig, start: int = 0,
               annotate: bool = False) -> Iterator[tuple[list, str, list]]:
    """Sentences start..start+n-1 of `stream` as (src tokens, tree, tgt tokens), each from its own seeded state."""
    sentence = _Grammar(cfg, annotate).sentence
    rng = random.Random()
    base = (seed << 40) | (stream << 32)  # i < 2**32: every (seed, stream, i) gets its own state
    for i in range(start, start + n):
        rng.seed(base | i)
        yield sentence(rng.random)


def _stream(n: int, seed: int, stream: int, cfg: SynthConfig, start: int = 0) -> Iterator[Example]:
    for src, tree, tgt in _sentences(n, seed, stream, cfg, start):
        yield Example(" ".join(src), " ".join(tgt), tree)


def generate(n: int, seed: int, cfg: SynthConfig = SynthConfig(), *, start: int = 0) -> Iterator[Example]:
    """Pairs start..start+n-1 of the stream for `seed` (lazily). Pair i depends only on (seed, i, cfg)."""
    _check_int("the number of pairs", n, 1, MAX_PAIRS)
    _check_int("the seed", seed, 0)
    _check_int("start", start, 0, 2**32 - 1 - n)
    _check_cfg(cfg)
    return _stream(n, seed, 0, cfg, start)
