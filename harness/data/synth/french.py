"""The French-like target: its lexicon (the same lemmas, French-like spellings, two genders), its closed
classes, and elision (le/la/de/que before a vowel)."""

from __future__ import annotations

import random

from harness.data.synth.config import SynthConfig
from harness.data.synth.lexicon import _LEXICON_FIELDS, _cached_lexicon, lexicon

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
