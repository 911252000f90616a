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
"""
from __future__ import annotations

import dataclasses
import json
import random
from bisect import bisect_right
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from harness.errors import UserError
from harness.io import atomic_dir

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


# --------------------------------------------------------------------------------------------- lexicon
# Source spellings look English; target spellings look German (with umlauts, so files are real UTF-8).
_SRC_ON = "b d f g k l m n p r s t v w br dr gl pl st tr sn cr fl gr sh th ch j".split()
_SRC_NU = "a e i o u ee oo ai ou".split()
_SRC_CO = ["", "", "", "n", "m", "t", "k", "p", "d", "rd", "nd", "sk", "ll", "ng", "x"]
_TGT_ON = "b d f g h k l m n r s t w z sch kr pf gr bl fr kl sp".split()
_TGT_NU = "a e i o u ä ö ü ei au ie".split()
_TGT_CO = ["", "", "", "n", "m", "t", "ck", "ch", "nd", "rt", "lz", "ß", "ng"]

# Target inflection: all suffixes, so subword BPE has something to learn.
_G_SUF = ("er", "a", "es")  # masc, fem, neut agreement on determiners, adjectives, relative pronouns
_PL_SUF = "i"  # plural agreement, after the gender suffix
_CASE_SUF = ("", "n", "m")  # nominative, accusative, dative on determiners and relative pronouns
_NOUN_PL = ("e", "en", "er")  # noun plural by gender
_VERB_AGR = (("ar", "aren"), ("is", "isen"), ("um", "umen"))  # [gender][plural]: subject agreement
_TENSE = ("", "te")  # present, past, between verb stem and agreement
NOM, ACC, DAT = 0, 1, 2

# Closed classes: source word -> target stem (determiners and relative pronoun inflect, the rest do not).
_DET_SG = (("the", "d"), ("a", "ein"), ("this", "dies"), ("every", "jed"), ("no", "kein"))
_DET_PL = (("the", "d"), ("some", "manch"), ("these", "dies"), ("many", "viel"), ("no", "kein"))
_DET_W = (0.5, 0.3, 0.1, 0.05, 0.05)  # same weights for both tables
_PRONOUNS = (("he", "ehr", 0, 0), ("she", "sie", 1, 0), ("it", "es", 2, 0), ("they", "sii", 2, 1))
# Prepositions that attach to NPs and ones that attach to VPs are disjoint, so the gold tree is
# recoverable from the words; the bit is the sense cue an ambiguous noun inside the PP follows.
_PREP_NP = (("in", "drin", 0), ("on", "auf", 1), ("near", "nah", 0), ("under", "unt", 1),
            ("behind", "hint", 0), ("with", "mit", 1), ("of", "von", 0), ("beside", "neb", 1))
_PREP_VP = (("after", "nach", 0), ("before", "vor", 1), ("during", "während", 0),
            ("without", "ohn", 1), ("despite", "trotz", 0), ("for", "für", 1))
_CONJ = (("and", "und"), ("or", "oder"), ("but", "aber"))
_INTENS = (("very", "sehr"), ("quite", "ganz"), ("rather", "ziemlich"))
_REL, _COMP = "wel", "dass"  # target relative-pronoun stem, complementizer
T, I, C = 0, 1, 2  # verb kinds: transitive, intransitive, takes a that-clause


def _tgt_det(stem: str, g: int, pl: int, case: int) -> str:
    return stem + _G_SUF[g] + (_PL_SUF if pl else "") + _CASE_SUF[case]


class _Lexicon:
    """Spellings and hidden lexical features; index = frequency rank inside the part of speech."""

    def __init__(self, cfg: SynthConfig):
        rng = random.Random(cfg.lexicon_seed)
        src_used = {w for tab in (_DET_SG, _DET_PL, _CONJ, _INTENS) for w, _ in tab}
        src_used |= {p[0] for p in _PRONOUNS + _PREP_NP + _PREP_VP} | {"that"}
        tgt_used = {p[1] for p in _PRONOUNS + _PREP_NP + _PREP_VP} | {_COMP}
        tgt_used |= {t for tab in (_CONJ, _INTENS) for _, t in tab}
        tgt_used |= {_tgt_det(s, g, pl, c) for s in {t for _, t in _DET_SG + _DET_PL} | {_REL}
                     for g in range(3) for pl in (0, 1) for c in range(3)}

        def word(on, nu, co, rank):  # frequent words are short, as in real languages
            n_syl = 1 + (rank >= 40) + (rank >= 600 or rng.random() < 0.15)
            return "".join(rng.choice(on) + rng.choice(nu) + rng.choice(co) for _ in range(n_syl))

        def fresh(used, on, nu, co, rank, forms):  # a stem none of whose surface forms is taken
            while True:
                stem = word(on, nu, co, rank)
                out = forms(stem)
                if not used.intersection(out) and len(set(out)) == len(out):
                    used.update(out)
                    return stem

        src = lambda r, forms: fresh(src_used, _SRC_ON, _SRC_NU, _SRC_CO, r, forms)
        tgt = lambda r, forms: fresh(tgt_used, _TGT_ON, _TGT_NU, _TGT_CO, r, forms)
        n_amb_n = cfg.n_ambiguous // 2
        n_amb_v = cfg.n_ambiguous - n_amb_n

        # Nouns: source sg/pl; per sense a target stem and a gender; animacy is a lemma property.
        self.n_src = [src(r, lambda s: [s, s + "s"]) for r in range(cfg.n_nouns)]
        self.n_anim = [rng.random() < 0.4 for _ in range(cfg.n_nouns)]
        amb = set(rng.sample(range(5, min(cfg.n_nouns, 5 + 8 * n_amb_n)), n_amb_n))
        self.n_amb = [r in amb for r in range(cfg.n_nouns)]
        self.n_gender: list[tuple[int, int]] = []
        self.n_tgt: list[tuple[tuple[str, str], tuple[str, str]]] = []  # [noun][sense][plural]
        for r in range(cfg.n_nouns):
            senses = []
            for _ in range(2 if self.n_amb[r] else 1):
                g = rng.randrange(3)
                stem = tgt(r, lambda s: [s, s + _NOUN_PL[g]])
                senses.append((g, (stem, stem + _NOUN_PL[g])))
            senses = senses * (3 - len(senses))  # unambiguous: both senses are the same
            self.n_gender.append((senses[0][0], senses[1][0]))
            self.n_tgt.append((senses[0][1], senses[1][1]))

        # Verbs: source base/-s/-ed; target [sense][tense][gender][plural].
        self.v_src = [src(r, lambda s: [s, s + "s", s + "ed"]) for r in range(cfg.n_verbs)]
        self.v_kind = [rng.choices((T, I, C), (0.6, 0.3, 0.1))[0] for _ in range(cfg.n_verbs)]
        self.v_kind[0] = T  # so a transitive verb always exists, even in tiny lexicons
        self.v_bit = [rng.randrange(2) for _ in range(cfg.n_verbs)]
        trans = [r for r in range(cfg.n_verbs) if self.v_kind[r] == T]
        pool = trans[: 8 * n_amb_v]
        amb = set(rng.sample(pool, min(n_amb_v, len(pool))))
        self.v_amb = [r in amb for r in range(cfg.n_verbs)]
        vforms = lambda s: [s + t + a for t in _TENSE for ga in _VERB_AGR for a in ga]
        self.v_tgt = []
        for r in range(cfg.n_verbs):
            stems = [tgt(r, vforms) for _ in range(2 if self.v_amb[r] else 1)] * 2
            self.v_tgt.append(tuple(tuple(tuple(tuple(s + t + a for a in ga) for ga in _VERB_AGR)
                                          for t in _TENSE) for s in stems[:2]))

        # Adjectives (target: [gender][plural]) and adverbs (source -ly, target uninflected).
        aforms = lambda s: [s + g + p for g in _G_SUF for p in ("", _PL_SUF)]
        self.a_src = [src(r, lambda s: [s]) for r in range(cfg.n_adjectives)]
        self.a_bit = [rng.randrange(2) for _ in range(cfg.n_adjectives)]
        self.a_tgt = [tuple((s + g, s + g + _PL_SUF) for g in _G_SUF)
                      for s in (tgt(r, aforms) for r in range(cfg.n_adjectives))]
        self.r_src = [src(r, lambda s: [s + "ly"]) + "ly" for r in range(cfg.n_adverbs)]
        self.r_tgt = [tgt(r, lambda s: [s]) for r in range(cfg.n_adverbs)]

    def analyses(self) -> tuple[dict, dict]:
        """Surface form -> analysis, for the source and the target side (tests and diagnostics)."""
        src, tgt = {}, {}
        for i, w in enumerate(self.n_src):
            src[w], src[w + "s"] = ("N", i, 0), ("N", i, 1)
            for sense in (0, 1):
                for pl in (0, 1):
                    tgt[self.n_tgt[i][sense][pl]] = ("N", i, sense, pl)
        for i, w in enumerate(self.v_src):
            src[w] = src[w + "s"] = src[w + "ed"] = ("V", i)
            for sense in (0, 1):
                for tense in (0, 1):
                    for g in range(3):
                        for pl in (0, 1):
                            tgt[self.v_tgt[i][sense][tense][g][pl]] = ("V", i, sense, tense, g, pl)
        for i, w in enumerate(self.a_src):
            src[w] = ("J", i)
            for g in range(3):
                for pl in (0, 1):
                    tgt[self.a_tgt[i][g][pl]] = ("J", i, g, pl)
        for i, (s, t) in enumerate(zip(self.r_src, self.r_tgt)):
            src[s], tgt[t] = ("R", i), ("R", i)
        for g in range(3):
            for pl in (0, 1):
                for case in range(3):
                    tgt[_tgt_det(_REL, g, pl, case)] = ("REL", g, pl, case)
        return src, tgt


# The settings a lexicon depends on: grammar knobs and the target leave the base lexicon alone.
_LEXICON_FIELDS = ("n_nouns", "n_verbs", "n_adjectives", "n_adverbs", "n_ambiguous", "lexicon_seed")


@lru_cache(maxsize=16)
def _cached_lexicon(kind: type, *values):
    return kind(SynthConfig(**dict(zip(_LEXICON_FIELDS, values))))


def lexicon(cfg: SynthConfig) -> _Lexicon:
    return _cached_lexicon(_Lexicon, *(getattr(cfg, f) for f in _LEXICON_FIELDS))


# ------------------------------------------------------------------------------ the French-like target
# The second target language (Table 2's EN-FR column). Its lexicon is drawn from a random stream of its own,
# and a sentence's realisation draws nothing, so a French-like corpus has exactly the source sentences and
# trees of the German-like one with the same seeds: the two differ in the target language alone.
# Where the German-like target reorders (verb second / verb final, postpositions, mirrored adjectives),
# this one keeps the source's SVO order, as French does; its own difficulties are local:
# - adjectives after the noun in source order, except a few frequent ones before it (a lemma property,
#   as French "grand", "petit", "beau" are); intensifiers before their adjective;
# - two genders (hidden, per target noun sense) and number: determiners, adjectives and past participles
#   agree; a bare English plural gets the determiner "des"; the past is compound (auxiliary + participle,
#   an adverb between them), and in an object relative clause the participle agrees with the antecedent,
#   which may be far to the left ("la chose que les gens ont vue");
# - two verb classes (-er and -ir endings), a lemma property; nouns ending in -au/-eu take -x in the plural;
# - elision and contraction: le/la -> l', de -> d', que -> qu' before a vowel, ce -> cet before a vowel,
#   de + le -> du, de + les -> des, de + des -> de.
_FR_ON = "b c d f g j l m n p r s t v ch gr br pl tr cl fl pr".split()
_FR_ON_FIRST = _FR_ON + [""] * 6     # about a fifth of words begin with a vowel, so elision happens
_FR_NU = "a e i o u é è ai au ou oi eu an on in".split()
_FR_CO = ["", "", "", "r", "l", "n", "t", "c", "ss", "ll", "nd", "rt"]
_FR_VOWELS = frozenset("aeiouéèêàâô")

# [pl][determiner] -> the (masc, fem) forms, for _DET_SG and _DET_PL's English determiners in order.
_FR_DET = ((("le", "la"), ("un", "une"), ("ce", "cette"), ("chaque", "chaque"), ("aucun", "aucune")),
           (("les", "les"), ("quelques", "quelques"), ("ces", "ces"), ("beaucoup de", "beaucoup de"),
            ("aucuns", "aucunes")))
_FR_BARE_PL = "des"
_FR_PRONOUNS = (("il", 0, 0), ("elle", 1, 0), ("il", 0, 0), ("ils", 0, 1))   # he, she, it, they
_FR_PREP_NP = ("dans", "sur", "près de", "sous", "derrière", "avec", "de", "à côté de")   # as _PREP_NP
_FR_PREP_VP = ("après", "avant", "pendant", "sans", "malgré", "pour")                     # as _PREP_VP
_FR_CONJ = ("et", "ou", "mais")
_FR_INTENS = ("très", "assez", "plutôt")
_FR_AUX = ("a", "ont")                          # the auxiliary of the compound past, by subject number
_FR_VERB_END = (("e", "ent", "é"), ("it", "issent", "i"))   # [class]: present sg, present pl, participle
_FR_AGR = (("", "s"), ("e", "es"))             # [gender][plural]: adjectives and participles
_FR_CLOSED = {w for tab in (_FR_DET[0], _FR_DET[1]) for pair in tab for form in pair for w in form.split()} | \
    {p[0] for p in _FR_PRONOUNS} | {w for p in _FR_PREP_NP + _FR_PREP_VP for w in p.split()} | \
    set(_FR_CONJ + _FR_INTENS + _FR_AUX) | {_FR_BARE_PL, "qui", "que", "cet", "du"}


def _fr_plural(stem: str) -> str:
    """-s, or -x after -au and -eu; a stem ending in -s would not change (its lemma is drawn again)."""
    return stem if stem.endswith("s") else stem + ("x" if stem.endswith(("au", "eu")) else "s")


class _FrenchLexicon:
    """French-like spellings for the lemmas of `lexicon(cfg)`, with their own genders, verb classes and
    adjective positions; the lemmas' other features (senses, animacy, verb kinds) are the base lexicon's."""

    def __init__(self, cfg: SynthConfig):
        base = lexicon(cfg)
        rng = random.Random((cfg.lexicon_seed << 8) | 0x46)      # a stream of its own ("F")
        used = set(_FR_CLOSED)

        def fresh(rank, forms):  # frequent words are short; no surface form shared with another word
            while True:
                n_syl = 1 + (rank >= 40) + (rank >= 600 or rng.random() < 0.15)
                stem = "".join(rng.choice(_FR_ON_FIRST if k == 0 else _FR_ON) + rng.choice(_FR_NU) +
                               rng.choice(_FR_CO) for k in range(n_syl))
                out = forms(stem)
                if not used.intersection(out) and len(set(out)) == len(out):
                    used.update(out)
                    return stem

        self.n_gender, self.n_tgt = [], []        # [noun][sense]; [noun][sense][plural]
        for r in range(cfg.n_nouns):
            senses = []
            for _ in range(2 if base.n_amb[r] else 1):
                stem = fresh(r, lambda s: [s, _fr_plural(s)])
                senses.append((rng.randrange(2), (stem, _fr_plural(stem))))
            senses = senses * (3 - len(senses))
            self.n_gender.append((senses[0][0], senses[1][0]))
            self.n_tgt.append((senses[0][1], senses[1][1]))
        # Verbs: [sense] -> (present sg, present pl, participle[gender][plural]).
        self.v_class, self.v_tgt = [], []
        for r in range(cfg.n_verbs):
            cls = 0 if rng.random() < 0.75 else 1
            sg, pl, part = _FR_VERB_END[cls]
            forms = lambda s: [s + sg, s + pl] + [s + part + a for ga in _FR_AGR for a in ga]  # noqa: B023
            stems = [fresh(r, forms) for _ in range(2 if base.v_amb[r] else 1)] * 2
            self.v_class.append(cls)
            self.v_tgt.append(tuple((s + sg, s + pl, tuple(tuple(s + part + a for a in ga) for ga in _FR_AGR))
                                    for s in stems[:2]))
        aforms = lambda s: [s + a for ga in _FR_AGR for a in ga]  # noqa: E731
        self.a_tgt = [tuple(tuple(s + a for a in ga) for ga in _FR_AGR)
                      for s in (fresh(r, aforms) for r in range(cfg.n_adjectives))]
        self.a_pre = [r < 12 and rng.random() < 0.5 for r in range(cfg.n_adjectives)]
        self.r_tgt = [fresh(r, lambda s: [s + "ment"]) + "ment" for r in range(cfg.n_adverbs)]

    def analyses(self) -> dict:
        """Target surface form -> analysis (tests and diagnostics), as _Lexicon.analyses' target side."""
        tgt = {}
        for i, senses in enumerate(self.n_tgt):
            for sense in (0, 1):
                for pl in (0, 1):
                    tgt[senses[sense][pl]] = ("N", i, sense, pl, self.n_gender[i][sense])
        for i, senses in enumerate(self.v_tgt):
            for sense, (sg, pl, part) in enumerate(senses):
                tgt[sg], tgt[pl] = ("V", i, sense, 0), ("V", i, sense, 1)
                for g in (0, 1):
                    for n in (0, 1):
                        tgt[part[g][n]] = ("PART", i, sense, g, n)
        for i, forms in enumerate(self.a_tgt):
            for g in (0, 1):
                for n in (0, 1):
                    tgt[forms[g][n]] = ("J", i, g, n)
        for i, w in enumerate(self.r_tgt):
            tgt[w] = ("R", i)
        return tgt


def french_lexicon(cfg: SynthConfig) -> _FrenchLexicon:
    return _cached_lexicon(_FrenchLexicon, *(getattr(cfg, f) for f in _LEXICON_FIELDS))


def _fr_vowel(word: str) -> bool:
    return word[:1] in _FR_VOWELS


def french_elide(tokens: list[str]) -> list[str]:
    """The target's contractions, then its elisions (see the French-like target above)."""
    merged: list[str] = []
    i, n = 0, len(tokens)
    while i < n:                     # de + le -> du (not before a vowel: de l'ami), de + les -> des, de + des -> de
        w, nxt, after = tokens[i], tokens[i + 1] if i + 1 < n else "", tokens[i + 2] if i + 2 < n else ""
        if w == "de" and (nxt in ("les", "des") or (nxt == "le" and not _fr_vowel(after))):
            merged.append({"le": "du", "les": "des", "des": "de"}[nxt])
            i += 2
        else:
            merged.append(w)
            i += 1
    out: list[str] = []
    i, n = 0, len(merged)
    while i < n:                     # le, la, de, que -> l', d', qu' joined to a vowel-initial word; ce -> cet
        w, nxt = merged[i], merged[i + 1] if i + 1 < n else ""
        if w in ("le", "la", "de", "que") and _fr_vowel(nxt):
            out.append(w[:-1] + "'" + nxt)
            i += 2
        else:
            out.append("cet" if w == "ce" and _fr_vowel(nxt) else w)
            i += 1
    return out


def _zipf(ranks, s: float) -> tuple[list[float], float]:
    """Cumulative 1/rank^s weights for bisect, and their total; the last is made infinite so that
    float rounding of random() * total can never fall off the end."""
    cum = list(accumulate(1.0 / (r + 1) ** s for r in ranks))
    total = cum[-1]
    cum[-1] = float("inf")
    return cum, total


# --------------------------------------------------------------------------------------------- grammar
MAIN, COMP, RSUBJ, ROBJ = 0, 1, 2, 3  # clause kinds: V2 main, that-complement, subject/object-gap rel.
TARGETS = ("de", "fr")


class _Rules(NamedTuple):
    """How one target language realises what the source grammar drew (the draws are the same for all)."""
    gender: list           # [noun][sense] -> the target noun's gender
    prons: tuple           # [pronoun] -> (target word, gender, plural)
    conj: tuple            # [conjunction] -> target word
    rel_comma: bool        # relative clauses set off by commas
    np: Callable           # (det k or -1, plural, noun, sense, gender, case, [(adj, intensifier or -1)]) -> tgt
    pp: Callable           # (vp-level, preposition k, the NP's tgt) -> tgt
    clause: Callable       # (kind, subject tgt or None, sg, spl, ag, apl, verb, sense, past, adverb or -1,
    #                          pp tgt, object tgt, complement tgt or None) -> tgt
    finish: Callable       # the whole sentence's tgt tokens, "." included -> tgt
    noun: Callable         # (noun, sense, plural) -> the target noun's form (agreement_pairs)
    agreeing: Callable     # (verb, sense, past, sg, spl) -> (the word that agrees with the subject,
    #                          ((feature, the form that breaks the agreement in it), ...))  (agreement_pairs)


def _german(cfg: SynthConfig) -> _Rules:
    """Verb second in main clauses, verb final elsewhere, postpositions, adjectives after the noun
    mirrored, three genders, case on determiners and relative pronouns (the module docstring)."""
    lex = lexicon(cfg)
    n_tgt, a_tgt, r_tgt, v_tgt = lex.n_tgt, lex.a_tgt, lex.r_tgt, lex.v_tgt

    def paradigm(stem):  # [gender][plural][case]
        return [[[_tgt_det(stem, g, pl, c) for c in range(3)] for pl in (0, 1)] for g in range(3)]

    dets = [[paradigm(t) for _, t in tab] for tab in (_DET_SG, _DET_PL)]  # [pl][k]
    rel = paradigm(_REL)  # [gender][plural][case]
    intens = [t for _, t in _INTENS]
    preps = ([t for _, t, _ in _PREP_NP], [t for _, t, _ in _PREP_VP])

    def np(dk, pl, i, sense, g, case, adjs):
        tgt = [dets[pl][dk][g][pl][case]] if dk >= 0 else []
        tgt.append(n_tgt[i][sense][pl])
        for j, k in reversed(adjs):  # adjectives follow the noun, mirrored, intensifier after
            tgt.append(a_tgt[j][g][pl])
            if k >= 0:
                tgt.append(intens[k])
        return tgt

    def pp(vp, k, np_tgt):
        return np_tgt + [preps[vp][k]]  # postposition

    def clause(kind, s_tgt, sg, spl, ag, apl, v, sense, past, r, pp_tgt, o_tgt, comp):
        if kind == RSUBJ:
            s_tgt = [rel[ag][apl][NOM]]
        elif kind == ROBJ:
            s_tgt = [rel[ag][apl][ACC]] + s_tgt
        vt = v_tgt[v][sense][past][sg][spl]
        if kind == MAIN:  # verb second; VP-level PP before the object; a that-clause last
            tgt = s_tgt + [vt]
            if r >= 0:
                tgt.append(r_tgt[r])
            tgt += pp_tgt
            tgt += o_tgt
        else:  # verb final, a that-clause extraposed after the verb
            tgt = [",", _COMP] + s_tgt if kind == COMP else list(s_tgt)
            if r >= 0:
                tgt.append(r_tgt[r])
            tgt += pp_tgt
            tgt += o_tgt
            tgt.append(vt)
        if comp:
            tgt += comp
        return tgt

    def finish(tgt):
        # Relative clauses are closed by a comma; drop the ones that run into another comma or the end.
        if "," in tgt:
            tgt = [w for w, nxt in zip(tgt, tgt[1:] + [""]) if not (w == "," and nxt in (",", "."))]
        return tgt

    def agreeing(v, sense, past, sg, spl):  # the finite verb, in gender and number (_VERB_AGR)
        forms = v_tgt[v][sense][past]
        return forms[sg][spl], (("number", forms[sg][1 - spl]), ("gender", forms[(sg + 1) % 3][spl]))

    return _Rules([list(gs) for gs in lex.n_gender], tuple((t, g, pl) for _, t, g, pl in _PRONOUNS),
                  tuple(t for _, t in _CONJ), True, np, pp, clause, finish,
                  lambda i, sense, pl: n_tgt[i][sense][pl], agreeing)


def _french(cfg: SynthConfig) -> _Rules:
    """The source's SVO order, prepositions, adjectives after the noun (a few before), two genders,
    participle agreement, elision and contraction (the French-like target above)."""
    lex = french_lexicon(cfg)
    n_tgt, a_tgt, a_pre, r_tgt, v_tgt = lex.n_tgt, lex.a_tgt, lex.a_pre, lex.r_tgt, lex.v_tgt
    dets = [[[form.split() for form in pair] for pair in tab] for tab in _FR_DET]  # [pl][k][g] -> tokens
    preps = ([p.split() for p in _FR_PREP_NP], [p.split() for p in _FR_PREP_VP])

    def adjective(j, k, g, pl):
        return [_FR_INTENS[k], a_tgt[j][g][pl]] if k >= 0 else [a_tgt[j][g][pl]]

    def np(dk, pl, i, sense, g, case, adjs):
        tgt = list(dets[pl][dk][g]) if dk >= 0 else [_FR_BARE_PL]   # dk < 0: a bare plural
        post = []
        for j, k in adjs:          # in source order: before the noun (a_pre) or after it
            (tgt if a_pre[j] else post).extend(adjective(j, k, g, pl))
        tgt.append(n_tgt[i][sense][pl])
        return tgt + post

    def pp(vp, k, np_tgt):
        return preps[vp][k] + np_tgt

    def clause(kind, s_tgt, sg, spl, ag, apl, v, sense, past, r, pp_tgt, o_tgt, comp):
        if kind == RSUBJ:
            tgt = ["qui"]
        else:
            tgt = (["que"] if kind in (ROBJ, COMP) else []) + s_tgt
        present_sg, present_pl, part = v_tgt[v][sense]
        if past:   # the compound past; an object relative's participle agrees with its antecedent
            tgt.append(_FR_AUX[spl])
            if r >= 0:
                tgt.append(r_tgt[r])
            tgt.append(part[ag][apl] if kind == ROBJ else part[0][0])
        else:
            tgt.append(present_pl if spl else present_sg)
            if r >= 0:
                tgt.append(r_tgt[r])
        tgt += o_tgt
        tgt += pp_tgt
        if comp:
            tgt += comp
        return tgt

    def agreeing(v, sense, past, sg, spl):  # in number only: the auxiliary of the past, else the verb
        if past:
            return _FR_AUX[spl], (("number", _FR_AUX[1 - spl]),)
        forms = v_tgt[v][sense][:2]
        return forms[spl], (("number", forms[1 - spl]),)

    return _Rules(lex.n_gender, _FR_PRONOUNS, _FR_CONJ, False, np, pp, clause, french_elide,
                  lambda i, sense, pl: n_tgt[i][sense][pl], agreeing)


class Phrase(NamedTuple):
    """A constituent of a made-up sentence: its source words, its bracketed tree, its target tokens."""
    src: list
    tree: str
    tgt: list


class NounPhrase(NamedTuple):
    """A noun phrase, with what the words around it agree with or depend on."""
    src: list
    tree: str
    tgt: list
    gender: int
    plural: int
    animate: bool
    open: bool          # ends in a relative clause (no PP may follow it: the attachment would be ambiguous)
    head: "Marked | None" = None    # annotating: the target token a verb agreeing with this phrase agrees with


class Marked(str):
    """A target token that takes part in a subject-verb agreement, in a sentence made by an annotating grammar
    (`agreement_pairs`); the text is the token's, so a sentence reads the same. A controller (a subject's head
    noun or pronoun, or a relative clause's antecedent) has `controller` None and no alternatives; an agreeing
    word has its controller (None where there is no single one: a coordination) and the forms that would
    break the agreement, `alternatives` ((feature, form), ...)."""
    controller: "Marked | None" = None
    alternatives: tuple = ()


def _marked(token: str, controller: "Marked | None" = None, alternatives: tuple = ()) -> Marked:
    out = Marked(token)
    out.controller, out.alternatives = controller, alternatives
    return out


class VerbObject(NamedTuple):
    """What follows a verb: a noun phrase (transitive) or a that-clause (C verbs), or nothing."""
    src: list | tuple
    tree: str | None
    tgt: list
    comp: list | None   # a that-clause's target tokens
    open: bool
    sense: int          # the verb's sense, where its object's animacy decides it


class _Grammar:
    """The made-up English grammar and its translation rules (`_Rules`), one method per construction. Built
    once per config: the leaves, forms and samplers are precomputed, so that the methods only draw, index
    and concatenate. Every draw comes from `rnd`, in a fixed order, so a sentence is a function of its
    seed (the pinned corpus digests of tests/test_synth.py hold it)."""

    def __init__(self, cfg: SynthConfig, annotate: bool = False):
        lex = lexicon(cfg)
        rules = _french(cfg) if cfg.target == "fr" else _german(cfg)
        self.t_np, self.t_pp, self.t_clause, self.t_finish = rules.np, rules.pp, rules.clause, rules.finish
        # annotate: mark each subject-verb agreement's two target tokens (Marked); draws nothing, so the
        # sentences are those of the same seeds unannotated.
        self.annotate, self.t_noun, self.t_agreeing = annotate, rules.noun, rules.agreeing
        self.antecedent: Marked | None = None      # annotating: the head of the NP a relative clause is in
        self.rel_comma = rules.rel_comma
        self.max_len, self.max_depth, self.p_rel, self.p_coord = cfg.max_len, cfg.max_depth, cfg.p_relative, cfg.p_coord
        self.p_pp, self.p_vpp = cfg.p_pp, 0.6 * cfg.p_pp
        self.p_adj, self.p_adv, self.p_pron = cfg.p_adjective, cfg.p_adverb, cfg.p_pronoun
        self.p_pl, self.p_past = cfg.p_plural, cfg.p_past
        self.ncum, self.ntot = _zipf(range(cfg.n_nouns), cfg.zipf_s)
        self.acum, self.atot = _zipf(range(cfg.n_adjectives), cfg.zipf_s)
        self.rcum, self.rtot = _zipf(range(cfg.n_adverbs), cfg.zipf_s)
        self.vcum, self.vtot = _zipf(range(cfg.n_verbs), cfg.zipf_s)
        # Restricted verb samplers (transitive only; no that-clause) keep each verb's global rank weight.
        self.v_t = [v for v in range(cfg.n_verbs) if lex.v_kind[v] == T]
        self.v_ti = [v for v in range(cfg.n_verbs) if lex.v_kind[v] != C]
        self.tcum, self.ttot = _zipf(self.v_t, cfg.zipf_s)
        self.ticum, self.titot = _zipf(self.v_ti, cfg.zipf_s)
        self.detcum, self.dettot = list(accumulate(_DET_W)), sum(_DET_W)
        self.detcum[-1] = float("inf")
        # Precomputed leaves and forms: the hot path only indexes and concatenates.
        self.n_src = (lex.n_src, [w + "s" for w in lex.n_src])
        self.n_leaf = ([f"(NN {w})" for w in self.n_src[0]], [f"(NNS {w})" for w in self.n_src[1]])
        self.n_gender, self.n_amb, self.n_anim = rules.gender, lex.n_amb, lex.n_anim
        self.a_src, self.a_leaf, self.a_bit = lex.a_src, [f"(JJ {w})" for w in lex.a_src], lex.a_bit
        self.r_src, self.r_leaf = lex.r_src, [f"(ADVP (RB {w}))" for w in lex.r_src]
        self.v_forms = [(w, w + "s", w + "ed") for w in lex.v_src]  # VBP, VBZ, VBD
        self.v_kind, self.v_bit, self.v_amb = lex.v_kind, lex.v_bit, lex.v_amb
        self.dets = [[(w, f"(DT {w})") for w, _ in tab] for tab in (_DET_SG, _DET_PL)]  # [pl][k]
        self.prons = [(w, f"(NP (PRP {w}))", *t) for (w, _, _, _), t in zip(_PRONOUNS, rules.prons)]
        self.preps_np = [(w, f"(IN {w})", b) for w, _, b in _PREP_NP]
        self.preps_vp = [(w, f"(IN {w})", b) for w, _, b in _PREP_VP]
        self.intens = [(w, f"(RB {w})") for w, _ in _INTENS]
        self.conj_np = [(w, t) for (w, _), t in zip(_CONJ, rules.conj)]

    # --- noun phrases ---

    def pp(self, rnd, depth: int, table: list, vp: int) -> Phrase:
        """A prepositional phrase: a preposition of `table` and its dative noun phrase."""
        k = int(rnd() * len(table))
        w, leaf, bit = table[k]
        np = self.noun_phrase(rnd, depth + 1, bit, DAT, False, False)
        return Phrase([w] + np.src, f"(PP {leaf} {np.tree})", self.t_pp(vp, k, np.tgt))

    def adjectives(self, rnd, src: list, leaves: list, adjs: list, gbit: int) -> int:
        """One or two adjectives (an intensifier now and then), appended in place; returns the sense cue for
        the noun (the first adjective's, else gbit)."""
        sense_bit = gbit
        for k in range(2 if rnd() < 0.25 else 1):
            j = bisect_right(self.acum, rnd() * self.atot)
            if k == 0:
                sense_bit = self.a_bit[j]  # the first adjective is the sense cue for the noun
            if rnd() < 0.1:
                ik = int(rnd() * 3)
                iw, ileaf = self.intens[ik]
                src += (iw, self.a_src[j])
                leaves.append(f"(ADJP {ileaf} {self.a_leaf[j]})")
                adjs.append((j, ik))
            else:
                src.append(self.a_src[j])
                leaves.append(self.a_leaf[j])
                adjs.append((j, -1))
        return sense_bit

    def base_np(self, rnd, gbit: int, case: int) -> NounPhrase:
        """Determiner (plurals may be bare), adjectives and a noun, whose gender follows its sense."""
        pl = 1 if rnd() < self.p_pl else 0
        i = bisect_right(self.ncum, rnd() * self.ntot)
        src, leaves, adjs = [], [], []
        dk = -1
        if not pl or rnd() < 0.8:  # plurals may be bare
            dk = bisect_right(self.detcum, rnd() * self.dettot)
            src.append(self.dets[pl][dk][0])
            leaves.append(self.dets[pl][dk][1])
        sense_bit = self.adjectives(rnd, src, leaves, adjs, gbit) if rnd() < self.p_adj else gbit
        sense = sense_bit if self.n_amb[i] else 0
        g = self.n_gender[i][sense]
        src.append(self.n_src[pl][i])
        leaves.append(self.n_leaf[pl][i])
        tgt, head = self.t_np(dk, pl, i, sense, g, case, adjs), None
        if self.annotate:
            k = tgt.index(self.t_noun(i, sense, pl))
            tgt[k] = head = _marked(tgt[k])
        return NounPhrase(src, "(NP " + " ".join(leaves) + ")", tgt, g, pl, self.n_anim[i], False, head)

    def pronoun(self, rnd) -> NounPhrase:
        w, tree, t, g, pl = self.prons[int(rnd() * 4)]
        head = _marked(t) if self.annotate else None
        return NounPhrase([w], tree, [head or t], g, pl, True, False, head)

    def coordinated_np(self, rnd, gbit: int, case: int) -> NounPhrase:
        """Two noun phrases and a conjunction; agreement: plural, gender of the first conjunct."""
        a = self.base_np(rnd, gbit, case)
        b = self.base_np(rnd, gbit, case)
        cw, ct = self.conj_np[int(rnd() * 2)]
        return NounPhrase(a.src + [cw] + b.src, f"(NP {a.tree} (CC {cw}) {b.tree})", a.tgt + [ct] + b.tgt,
                          a.gender, 1, a.animate, False)

    def noun_phrase(self, rnd, depth: int, gbit: int, case: int, subj: bool, allow_rel: bool) -> NounPhrase:
        """A pronoun (subjects only), a coordination, or a base noun phrase with a PP and a relative clause
        where the depth allows."""
        if subj and rnd() < self.p_pron:
            return self.pronoun(rnd)
        deeper = depth < self.max_depth
        if deeper and rnd() < self.p_coord:
            return self.coordinated_np(rnd, gbit, case)
        base = self.base_np(rnd, gbit, case)
        if not deeper:
            return base
        src, tree, tgt = base.src, base.tree, base.tgt
        parts = None
        if rnd() < self.p_pp:  # NPs inside PPs get no relative clause: keeps attachment unambiguous
            s, tr, tg = self.pp(rnd, depth, self.preps_np, 0)
            src, tgt, parts = src + s, tgt + tg, [tree, tr]
        is_open = False
        if allow_rel and rnd() < self.p_rel:
            kind = ROBJ if rnd() < 0.4 else RSUBJ
            self.antecedent = base.head
            s, tr, tg = self.clause(rnd, depth + 1, kind, base.gender, base.plural, base.animate)
            src, tgt = src + ["that"] + s, (tgt + [","] + tg + [","] if self.rel_comma else tgt + tg)
            parts = (parts or [tree]) + [f"(SBAR (WHNP (WDT that)) (S {tr}))"]
            is_open = True
        if parts:
            tree = "(NP " + " ".join(parts) + ")"
        return NounPhrase(src, tree, tgt, base.gender, base.plural, base.animate, is_open, base.head)

    # --- clauses ---

    def verb(self, rnd, kind: int, deeper: bool) -> int:
        """An object-gap relative clause needs a transitive verb; at the depth limit, no that-clause verb."""
        if kind == ROBJ:
            return self.v_t[bisect_right(self.tcum, rnd() * self.ttot)]
        if deeper:
            return bisect_right(self.vcum, rnd() * self.vtot)
        return self.v_ti[bisect_right(self.ticum, rnd() * self.titot)]

    def verb_object(self, rnd, depth: int, kind: int, v: int, aanim: bool) -> VerbObject:
        """A transitive verb's object (none in an object-gap relative clause: the antecedent is it), or a C
        verb's that-clause; an ambiguous verb's sense follows its object's animacy."""
        vk, vb = self.v_kind[v], self.v_bit[v]
        o_src, o_tree, o_tgt, comp, is_open, sense = (), None, [], None, False, 0
        if vk == T:
            if kind == ROBJ:
                oanim = aanim
            else:
                obj = self.noun_phrase(rnd, depth, vb, ACC, False, True)
                o_src, o_tree, o_tgt, oanim, is_open = obj.src, obj.tree, obj.tgt, obj.animate, obj.open
            if self.v_amb[v]:
                sense = 0 if oanim else 1  # the verb's sense follows its object's animacy
        elif vk == C:
            c_src, c_tree, comp = self.clause(rnd, depth + 1, COMP)
            o_src, o_tree, is_open = ["that"] + c_src, f"(SBAR (IN that) (S {c_tree}))", True
        return VerbObject(o_src, o_tree, o_tgt, comp, is_open, sense)

    def verb_phrase(self, rnd, depth: int, deeper: bool, v: int, past: int, spl: int,
                    obj: VerbObject) -> tuple[list, str, int, list]:
        """-> source words, tree, the adverb's index (-1: none), a VP-level PP's target tokens."""
        vp_src, vp_tree = [], []
        r = -1
        if rnd() < self.p_adv:
            r = bisect_right(self.rcum, rnd() * self.rtot)
            vp_src.append(self.r_src[r])
            vp_tree.append(self.r_leaf[r])
        tag = 2 if past else (0 if spl else 1)
        vp_src.append(self.v_forms[v][tag])
        vp_tree.append(("(VBP ", "(VBZ ", "(VBD ")[tag] + self.v_forms[v][tag] + ")")
        vp_src += obj.src
        if obj.tree:
            vp_tree.append(obj.tree)
        pp_tgt = []
        # A VP-level PP after an object that ends in a clause would be ambiguous in attachment: skip it.
        if deeper and not obj.open and rnd() < self.p_vpp:
            s, tr, pp_tgt = self.pp(rnd, depth, self.preps_vp, 1)
            vp_src += s
            vp_tree.append(tr)
        return vp_src, "(VP " + " ".join(vp_tree) + ")", r, pp_tgt

    def clause(self, rnd, depth: int, kind: int, ag: int = 0, apl: int = 0, aanim: bool = False) -> Phrase:
        """-> src, tree (children of S), tgt. ag/apl/aanim describe a relative clause's antecedent."""
        deeper = depth < self.max_depth
        v = self.verb(rnd, kind, deeper)
        past = 1 if rnd() < self.p_past else 0
        if kind == RSUBJ:  # the gap is the subject: the verb agrees with the antecedent
            s_src, s_tree, s_tgt, sg, spl = (), None, None, ag, apl
            controller = self.antecedent
        else:
            subj = self.noun_phrase(rnd, depth, self.v_bit[v], NOM, True, True)
            s_src, s_tree, s_tgt, sg, spl = subj.src, subj.tree, subj.tgt, subj.gender, subj.plural
            controller = subj.head
        obj = self.verb_object(rnd, depth, kind, v, aanim)
        vp_src, vp, r, pp_tgt = self.verb_phrase(rnd, depth, deeper, v, past, spl, obj)
        tgt = self.t_clause(kind, s_tgt, sg, spl, ag, apl, v, obj.sense, past, r, pp_tgt, obj.tgt, obj.comp)
        if self.annotate:   # every clause's agreeing word is marked (inner clauses' first), so ours is the
            form, alternatives = self.t_agreeing(v, obj.sense, past, sg, spl)    # one plain token of its form
            k = next(k for k, t in enumerate(tgt) if t == form and type(t) is str)
            tgt[k] = _marked(form, controller, alternatives)
        return Phrase(list(s_src) + vp_src, f"{s_tree} {vp}" if s_tree else vp, tgt)

    # --- sentences ---

    def coordinated_sentence(self, rnd) -> Phrase:
        s1, t1, g1 = self.clause(rnd, 1, MAIN)
        s2, t2, g2 = self.clause(rnd, 1, MAIN)
        cw, ct = self.conj_np[int(rnd() * 3)]
        comma = cw == "but" or rnd() < 0.5
        mid_s, mid_t, mid_g = ([",", cw], "(, ,) ", [",", ct]) if comma else ([cw], "", [ct])
        return Phrase(s1 + mid_s + s2, f"(S (S {t1}) {mid_t}(CC {cw}) (S {t2}) (. .))", g1 + mid_g + g2)

    def sentence(self, rnd) -> tuple[list, str, list]:
        """One main clause or two coordinated ones, shorter than max_len words, and a full stop."""
        while True:
            if rnd() < self.p_coord:
                src, tree, tgt = self.coordinated_sentence(rnd)
            else:
                src, tree, tgt = self.clause(rnd, 0, MAIN)
                tree = f"(S {tree} (. .))"
            if len(src) < self.max_len:  # redraw from the same stream: still a function of (seed, i)
                break
        src.append(".")
        tgt.append(".")
        return src, tree, self.t_finish(tgt)


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


def _request(n_train: int, n_dev: int, n_test: int, seed: int, cfg: SynthConfig) -> dict:
    """The part of the manifest that decides the contents: equal requests give identical files."""
    settings = asdict(cfg)
    if settings["target"] == "de":   # German-like corpora made before the French-like target keep their manifests
        del settings["target"]
    return {"generator": "harness.data.synth", "generator_version": GENERATOR_VERSION, "seed": seed,
            "sizes": {"train": n_train, "dev": n_dev, "test": n_test}, "cfg": settings}


def _read_manifest(out: Path) -> dict | None:
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files_ok = all((out / f"{s}.{k}").is_file() for s in SPLITS for k in ("src", "tgt", "tree"))
    return manifest if isinstance(manifest, dict) and files_ok else None


def _existing(out: Path, request: dict) -> dict | None:
    """The manifest of an identical corpus at `out`; None if `out` is absent or empty; else UserError."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise UserError(f"The output path {out} is a file; give a directory for the corpus.")
    if not any(out.iterdir()):
        return None
    manifest = _read_manifest(out)
    if manifest is None:
        raise UserError(f"The output directory {out} is not empty and holds no synthetic corpus; "
                        "give a new or empty directory.")
    if {k: manifest.get(k) for k in request} != request:
        raise UserError(f"The output directory {out} holds a synthetic corpus made with other settings "
                        "(seed, sizes or config); delete it or give another directory.")
    return manifest


def write_corpus(out_dir: str | Path, n_train: int, n_dev: int, n_test: int, seed: int,
                 cfg: SynthConfig = SynthConfig(),
                 progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Writes train.src, train.tgt, train.tree, dev.*, test.* (UTF-8, one sentence a line, "\\n" endings),
    atomically (write to a temp dir in out_dir's parent, then rename), and a small manifest.json (sizes,
    seed, cfg as dict, counts of words/types, mean lengths). dev and test use their own random streams
    (train is exactly generate(n_train, seed, cfg)). An identical corpus already at out_dir is reused.
    progress(split, done, total) is called every 100k pairs and at the end of each split. Returns the
    manifest dict."""
    for name, n in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        _check_int(f"the number of {name[2:]} pairs", n, 1, MAX_PAIRS)
    _check_int("the seed", seed, 0)
    _check_cfg(cfg)
    out = Path(out_dir).expanduser().absolute()
    request = _request(n_train, n_dev, n_test, seed, cfg)
    if (manifest := _existing(out, request)) is not None:
        return manifest
    with atomic_dir(out) as tmp:
        stats = {}
        for stream, (split, n) in enumerate(zip(SPLITS, (n_train, n_dev, n_test))):
            stats[split] = _write_split(tmp, split, _stream(n, seed, stream, cfg), n, progress)
        manifest = {**request, "splits": stats,
                    "files": [f"{s}.{k}" for s in SPLITS for k in ("src", "tgt", "tree")]}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    # Ours, or the same corpus that another process finished first (anything else is refused here).
    return _existing(out, request)


def _write_split(tmp: Path, split: str, examples: Iterator[Example], n: int,
                 progress: Callable[[str, int, int], None] | None) -> dict:
    src_types: set[str] = set()
    tgt_types: set[str] = set()
    n_src = n_tgt = max_src = max_tgt = done = 0
    handles = [open(tmp / f"{split}.{kind}", "w", encoding="utf-8", newline="\n")
               for kind in ("src", "tgt", "tree")]
    try:
        chunk: tuple[list, list, list] = ([], [], [])
        for ex in examples:
            s, t = ex.src.split(), ex.tgt.split()
            src_types.update(s)  # a set update per line is cheap even at 10 M pairs; a Counter is not
            tgt_types.update(t)
            n_src, n_tgt = n_src + len(s), n_tgt + len(t)
            max_src, max_tgt = max(max_src, len(s)), max(max_tgt, len(t))
            chunk[0].append(ex.src)
            chunk[1].append(ex.tgt)
            chunk[2].append(ex.tree)
            done += 1
            if done % 100_000 == 0 or done == n:
                for h, lines in zip(handles, chunk):
                    h.write("\n".join(lines) + "\n")
                    lines.clear()
                if progress:
                    progress(split, done, n)
    finally:
        for h in handles:
            h.close()
    return {"pairs": done, "src_tokens": n_src, "tgt_tokens": n_tgt, "src_types": len(src_types),
            "tgt_types": len(tgt_types), "mean_src_len": round(n_src / done, 3),
            "mean_tgt_len": round(n_tgt / done, 3), "max_src_len": max_src, "max_tgt_len": max_tgt}


def synth_config(cfg) -> SynthConfig:
    """The grammar and lexicon settings a DataConfig names (lexicon seed and scale, depth, length, target)."""
    lex = SynthConfig(max_depth=cfg.max_depth, max_len=cfg.max_words, target=cfg.target, lexicon_seed=cfg.lexicon_seed)
    if cfg.lexicon_scale != 1.0:
        lex = SynthConfig(max_depth=cfg.max_depth, max_len=cfg.max_words, target=cfg.target,
                          lexicon_seed=cfg.lexicon_seed,
                          **{f: max(2, round(getattr(lex, f) * cfg.lexicon_scale))
                             for f in ("n_nouns", "n_verbs", "n_adjectives", "n_adverbs", "n_ambiguous")})
    return lex


def synth_corpus_dir(cfg) -> Path:
    """The made-up corpus a DataConfig names (sizes, seed, lexicon seed and scale, depth, length), written once into
    its cache directory (write_corpus); returns the directory."""
    lexicon_seed = cfg.lexicon_seed
    lex = synth_config(cfg)
    scale = "" if cfg.lexicon_scale == 1.0 else f"-lex{cfg.lexicon_scale:g}"
    if (cfg.max_depth, cfg.max_words) != (4, 70):     # the defaults keep their old cache names
        scale += f"-d{cfg.max_depth}-w{cfg.max_words}"
    if cfg.target != "de":
        scale += f"-{cfg.target}"
    if lexicon_seed:                                  # the default lexicon keeps the old cache names
        scale += f"-L{lexicon_seed}"
    root = Path(cfg.cache_dir).resolve() / \
        f"synth-{cfg.train_pairs}-{cfg.dev_pairs}-{cfg.test_pairs}-s{cfg.seed}{scale}"
    write_corpus(root, cfg.train_pairs, cfg.dev_pairs, cfg.test_pairs, cfg.seed, lex)
    return root
