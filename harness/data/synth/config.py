"""The made-up corpus's settings (SynthConfig), one example (Example) and the generator's constants."""

from __future__ import annotations

from dataclasses import dataclass

# Bump when the grammar or lexicon changes, so cached corpora made by an older generator are not reused.
GENERATOR_VERSION = 1
MAX_PAIRS = 10_000_000
SPLITS = ("train", "dev", "test")  # stream 0, 1, 2: dev and test never share random streams with train


@dataclass(frozen=True)
class SynthConfig:
    n_nouns: int = 3000
    n_verbs: int = 1000
    n_adjectives: int = 800
    n_adverbs: int = 200
    n_ambiguous: int = 200  # two-sense lemmas, half nouns and half verbs, drawn from the frequent ones
    zipf_s: float = 1.0  # sampling weight 1/rank^zipf_s inside each part of speech
    max_depth: int = 4  # how deep clauses, PPs and coordinations may nest
    p_relative: float = 0.32  # an NP gets a relative clause
    p_pp: float = 0.32  # an NP gets a PP; a VP gets one with 0.6 of this
    p_coord: float = 0.15  # an NP is a coordination; a sentence is two coordinated clauses
    p_adjective: float = 0.5
    p_adverb: float = 0.2
    p_pronoun: float = 0.08  # a subject is a pronoun
    p_plural: float = 0.35
    p_past: float = 0.5
    max_len: int = 70  # source tokens including the final "."; longer draws are redrawn
    lexicon_seed: int = 0  # fixes the spellings and lexical features, separately from the sentence seed
    target: str = "de"  # the target language: "de" (German-like) or "fr" (French-like, the same sources)


@dataclass(frozen=True)
class Example:
    src: str  # space-separated source words with final " ."
    tgt: str  # target sentence
    tree: str  # one-line PTB bracketed tree of src; its leaves (in order) are exactly src.split()
