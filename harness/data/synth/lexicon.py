"""The lexicon: Zipfian pseudo-words of the English-like source and the German-like target, by part of
speech, with genders, senses and plural forms; one per lexicon seed (cached)."""

from __future__ import annotations

import random
from functools import lru_cache
from itertools import accumulate

from harness.data.synth.config import SynthConfig

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


def _zipf(ranks, s: float) -> tuple[list[float], float]:
    """Cumulative 1/rank^s weights for bisect, and their total; the last is made infinite so that
    float rounding of random() * total can never fall off the end."""
    cum = list(accumulate(1.0 / (r + 1) ** s for r in ranks))
    total = cum[-1]
    cum[-1] = float("inf")
    return cum, total
