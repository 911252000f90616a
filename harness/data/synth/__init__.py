"""The synthetic EN-like -> DE-like (or FR-like) translation corpus, with gold constituency trees.

Real WMT data cannot ship, so this is the project's default data. It is built so that attention has to
work for its living (DESIGN.md, "The synthetic corpora"):

- the source is English-like SVO, made by a probabilistic grammar with bounded recursion: relative
  clauses (subject and object gap, so centre embedding happens), that-complements, PPs, coordination of
  NPs and clauses, adjectives (with intensifiers), adverbs, pronouns, number and tense;
- the lexicon is Zipfian (p ~ 1/rank^s inside each part of speech), thousands of pronounceable
  pseudo-words, with a different target spelling per lemma, so the model must learn a dictionary;
- some nouns and verbs have two senses with different target words: a verb's sense follows the animacy
  of its object (which may be the antecedent of an object-gap relative clause, far to the left), a
  noun's sense follows the class of its first adjective, or else of the verb/preposition governing it;
- the target is verb-second in main clauses and verb-final in subordinate and relative clauses, has
  postpositions, puts adjectives after the noun (mirrored), moves VP-level PPs before the object;
- target verbs agree with their subject in number AND gender (gender is a hidden lexical property of the
  target noun, never marked in the source), across relative clauses; determiners, adjectives and
  relative pronouns agree with the noun, and determiners/relative pronouns are marked for case.

Everything is a function of (seed, stream, i) and the lexicon seed: pair i is made by its own
random.Random, so a corpus is a prefix of any larger one with the same seed, and shards can be made
independently. No hash() of strings and no global random state, so output is byte-identical across runs.

The package: config.py (settings), lexicon.py and french.py (the vocabularies), grammar.py (source and target
rules), sentences.py (pairs from seed and index), probes.py (agreement contrasts, length buckets), corpus.py (the
files). This module re-exports what the rest of the harness uses.
"""

from harness.data.synth.config import GENERATOR_VERSION, MAX_PAIRS, SPLITS, Example, SynthConfig
from harness.data.synth.corpus import synth_config, synth_corpus_dir, write_corpus
from harness.data.synth.french import french_elide, french_lexicon
from harness.data.synth.grammar import TARGETS, Marked
from harness.data.synth.lexicon import lexicon
from harness.data.synth.probes import FINETUNE_STREAM, Contrast, LengthBucket, agreement_pairs, length_buckets
from harness.data.synth.sentences import generate

__all__ = [
    "GENERATOR_VERSION", "MAX_PAIRS", "SPLITS", "Example", "SynthConfig", "lexicon", "french_elide",
    "french_lexicon", "TARGETS", "Marked", "generate", "Contrast", "LengthBucket", "agreement_pairs",
    "length_buckets", "FINETUNE_STREAM", "synth_config", "synth_corpus_dir", "write_corpus"
]
