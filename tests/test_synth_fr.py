"""The French-like target of the made-up corpus: the German-like corpus's sources and trees, SVO kept,
adjectives after the noun (a few frequent ones before), agreement in gender and number (the participle of
an object relative with its antecedent), elision and contraction."""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace

import pytest

from harness.data import synth
from harness.data.synth import SynthConfig, french, french_elide, generate
from tests.helpers import is_base_np, leaves, nodes, parse

CFG = SynthConfig(target="fr")
SRC_AN, _ = synth.lexicon(CFG).analyses()
FR = synth.french_lexicon(CFG)
TGT_AN = FR.analyses()
ELIDED = ("l'", "d'", "qu'")


@pytest.fixture(scope="module")
def pairs():
    return list(zip(generate(6000, 11), generate(6000, 11, CFG)))


def words(tgt: str) -> list[str]:
    """Target tokens with an elided article or conjunction split off ("l'ami" -> "l'", "ami")."""
    out = []
    for w in tgt.split():
        head = next((e for e in ELIDED if w.startswith(e) and len(w) > len(e)), None)
        out += [head, w[len(head):]] if head else [w]
    return out


def lemma(w: str):
    an = TGT_AN.get(w)
    if an is None:
        return None
    return ("V", an[1]) if an[0] == "PART" else an[:2]


def test_sources_and_trees_are_the_german_like_corpus_s_and_the_german_like_corpus_is_unchanged(pairs):
    assert all(de.src == fr.src and de.tree == fr.tree and de.tgt != fr.tgt for de, fr in pairs)
    # The German-like corpus the calibrated profiles train on, pinned (digest of the generator before the
    # French-like target existed): adding a target must not change it
    # (a deliberate change bumps GENERATOR_VERSION, and this digest with it).
    digest = hashlib.sha256("".join(f"{de.src}\t{de.tgt}\t{de.tree}\n" for de, _ in pairs[:500]).encode())
    assert digest.hexdigest()[:16] == "2a843689200a901e"


def test_every_content_word_is_translated_once_and_the_order_mostly_kept(pairs):
    kept = kept_de = 0
    de_an = synth.lexicon(SynthConfig()).analyses()[1]
    closed = french._FR_CLOSED | set(ELIDED) | {",", "."}
    for de, fr in pairs[:3000]:
        src = [SRC_AN[w][:2] for w in fr.src.split() if w in SRC_AN]
        tgt = [lemma(w) for w in words(fr.tgt) if w not in closed]
        assert None not in tgt, fr                     # every other token is a word of the lexicon
        assert Counter(src) == Counter(tgt), fr
        nouns_verbs = lambda seq: [x for x in seq if x[0] in ("N", "V")]  # noqa: E731
        kept += nouns_verbs(src) == nouns_verbs(tgt)
        kept_de += nouns_verbs(src) == nouns_verbs([de_an[w][:2] for w in de.tgt.split()
                                                     if w in de_an and de_an[w][0] != "REL"])
    # SVO with prepositions: nouns and verbs always in the source's order (verb second/final: 58 % here)
    assert kept == 3000 and kept_de < 0.65 * 3000


def test_adjectives_follow_the_noun_except_the_few_frequent_ones_that_precede_it(pairs):
    before = Counter()
    for _, fr in pairs:
        for node in nodes(parse(fr.tree)):
            kids = node[1]
            if not (is_base_np(node) and len(kids) == 3 and kids[0][0] == "DT" and kids[1][0] == "JJ"):
                continue
            adj, noun = SRC_AN[kids[1][1][0]][1], SRC_AN[kids[2][1][0]][1]
            tgt = words(fr.tgt)
            i = [k for k, w in enumerate(tgt) if lemma(w) == ("N", noun)]
            j = [k for k, w in enumerate(tgt) if lemma(w) == ("J", adj)]
            if len(i) != 1 or len(j) != 1:
                continue
            assert (j[0] < i[0]) == FR.a_pre[adj], fr
            # the adjective agrees with the noun in gender and number
            _, _, sense, pl, g = TGT_AN[tgt[i[0]]]
            assert TGT_AN[tgt[j[0]]][2:] == (g, pl), fr
            before[j[0] < i[0]] += 1
    assert before[False] > 500 and before[True] > 50 and before[True] < before[False]


def test_an_object_relative_s_participle_agrees_with_its_antecedent(pairs):
    """(NP (NP .. noun) (SBAR that (S (NP ..) (VP (VBD v))))): "le N que X a V-é(e)(s)", the participle
    carrying the antecedent's gender and number, which the source never shows."""
    seen = Counter()
    for _, fr in pairs:
        tgt = words(fr.tgt)
        for node in nodes(parse(fr.tree)):
            kids = node[1]
            if not (node[0] == "NP" and len(kids) == 2 and is_base_np(kids[0]) and kids[1][0] == "SBAR"):
                continue
            rel = kids[1][1][1][1]                     # the children of the relative clause's S
            if [k[0] for k in rel] != ["NP", "VP"]:
                continue                               # a subject-gap relative clause
            verb = next((k for k in rel[1][1] if k[0].startswith("VB")), None)
            if verb is None or verb[0] != "VBD" or any(k[0] == "NP" for k in rel[1][1]):
                continue
            noun, v = SRC_AN[leaves(kids[0])[-1]][1], SRC_AN[verb[1][0]][1]
            n_hits = [k for k, w in enumerate(tgt) if lemma(w) == ("N", noun)]
            v_hits = [k for k, w in enumerate(tgt) if lemma(w) == ("V", v)]
            if len(n_hits) != 1 or len(v_hits) != 1:
                continue
            _, _, _, pl, g = TGT_AN[tgt[n_hits[0]]]
            part = TGT_AN[tgt[v_hits[0]]]
            assert part[0] == "PART" and part[3:] == (g, pl), fr
            assert "que" in tgt[n_hits[0]:v_hits[0]] or "qu'" in tgt[n_hits[0]:v_hits[0]], fr
            seen[g, pl] += 1
    assert sum(seen.values()) > 100 and len(seen) == 4


def test_the_main_verb_agrees_in_number_with_a_subject_across_its_relative_clause(pairs):
    checked = Counter()
    for _, fr in pairs:
        top = parse(fr.tree)
        subj, vp = top[1][0], top[1][1]
        if not (subj[0] == "NP" and len(subj[1]) == 2 and subj[1][1][0] == "SBAR" and is_base_np(subj[1][0])
                and vp[0] == "VP"):
            continue
        tag, verb = next((k[0], k[1][0]) for k in vp[1] if k[0].startswith("VB"))
        tgt = words(fr.tgt)
        v_hits = [k for k, w in enumerate(tgt) if lemma(w) == ("V", SRC_AN[verb][1])]
        noun = SRC_AN[leaves(subj[1][0])[-1]]
        if len(v_hits) != 1:
            continue
        pl = noun[2]
        form = TGT_AN[tgt[v_hits[0]]]
        if tag == "VBD":    # the compound past: the auxiliary carries the number
            aux = [w for w in tgt[:v_hits[0]] if w in french._FR_AUX][-1]
            assert aux == french._FR_AUX[pl] and form[0] == "PART", fr
        else:
            assert form[0] == "V" and form[3] == pl, fr
        checked[tag, pl] += 1
    assert sum(checked.values()) > 200 and len(checked) >= 3


def test_elision_and_contraction():
    assert french_elide("de le ami .".split()) == ["de", "l'ami", "."]
    assert french_elide("de le chat".split()) == ["du", "chat"]
    assert french_elide("de les amis".split()) == ["des", "amis"]
    assert french_elide("de des chats".split()) == ["de", "chats"]
    assert french_elide("près de des amis".split()) == ["près", "d'amis"]
    assert french_elide("que il a la amie".split()) == ["qu'il", "a", "l'amie"]
    assert french_elide("ce ami et cette amie".split()) == ["cet", "ami", "et", "cette", "amie"]


def test_elision_happens_in_the_corpus_and_never_is_left_undone(pairs):
    counts = Counter()
    for _, fr in pairs:
        tgt = fr.tgt.split()
        for w, nxt in zip(tgt, tgt[1:]):
            assert not (w in ("le", "la", "de", "que", "ce") and nxt[:1] in french._FR_VOWELS), fr
            assert not (w == "de" and nxt in ("le", "les", "des")), fr
        counts.update(w[:2] if w[:2] in ("l'", "d'") else w[:3] if w.startswith("qu'") else w
                      for w in tgt if w.startswith(ELIDED) or w in ("du", "des", "cet"))
    assert all(counts[k] > 20 for k in ("l'", "d'", "qu'", "du", "des", "cet")), counts


def test_the_target_is_named_in_the_manifest_and_a_wrong_one_is_one_sentence(tmp_path):
    from harness.errors import UserError
    manifest = synth.write_corpus(tmp_path / "fr", 20, 5, 5, seed=1, cfg=replace(CFG, n_nouns=50, n_verbs=20,
                                  n_adjectives=20, n_adverbs=10, n_ambiguous=4))
    assert manifest["cfg"]["target"] == "fr"
    de = synth.write_corpus(tmp_path / "de", 20, 5, 5, seed=1)
    assert "target" not in de["cfg"]          # the German-like corpora made before keep their manifests
    with pytest.raises(UserError, match=r"^SynthConfig.target must be one of de, fr"):
        list(generate(1, 1, replace(CFG, target="es")))


def test_table2_s_small_profiles_train_the_en_fr_rows_on_the_french_like_target_and_score_them_as_french(tmp_path):
    from harness.data.corpus import DataConfig, load_dataset
    from harness.report.table2 import row_pair
    from harness.study.kinds import load_study
    for profile in ("tiny", "gpu"):
        data = {t.row: t.data for t in load_study("studies/table2.yaml", profile, None, None).trials}
        rivals = {"gnmt": ("synth", "de"), "convs2s": ("synth", "de")} if profile == "tiny" else {}   # EN-DE rows
        assert {r: (d.name, d.target) for r, d in data.items()} == {
            "base": ("synth", "de"), "big": ("synth", "de"), "base_enfr": ("synth", "fr"), "big_enfr": ("synth", "fr"),
            **rivals}
    assert row_pair("base", "synth", "fr") == "en_fr" and row_pair("base", "synth", "de") == "en_de"
    small = dict(train_pairs=300, dev_pairs=20, test_pairs=20, lexicon_scale=0.05, max_depth=2, max_words=12,
                 cache_dir=str(tmp_path))
    fr = load_dataset(DataConfig(target="fr", **small), 200)
    de = load_dataset(DataConfig(**small), 200)
    assert (fr.tgt_lang, de.tgt_lang) == ("fr", "de") and fr.root != de.root and fr.root.name.endswith("-fr")
    assert fr.train.src_text == de.train.src_text and fr.train.tgt_text != de.train.tgt_text
