"""The grammar: the probabilistic English-like source with bounded recursion, and the rules that make the
German-like (verb-second, verb-final, case) or French-like target of each parse, with the gold tree."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Callable, NamedTuple

from harness.data.synth.config import SynthConfig
from harness.data.synth.french import (
    _FR_AUX,
    _FR_BARE_PL,
    _FR_CONJ,
    _FR_DET,
    _FR_INTENS,
    _FR_PREP_NP,
    _FR_PREP_VP,
    _FR_PRONOUNS,
    french_elide,
    french_lexicon,
)
from harness.data.synth.lexicon import (
    _COMP,
    _CONJ,
    _DET_PL,
    _DET_SG,
    _DET_W,
    _INTENS,
    _PREP_NP,
    _PREP_VP,
    _PRONOUNS,
    _REL,
    ACC,
    DAT,
    NOM,
    C,
    T,
    _tgt_det,
    _zipf,
    lexicon,
)

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
