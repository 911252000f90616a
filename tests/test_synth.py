"""Tests of the synthetic corpus: determinism, trees, reordering, agreement, ambiguity, Zipf, files."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import replace

import pytest

from harness.data import synth
from harness.data.synth import Example, SynthConfig, generate, write_corpus
from harness.data.synth.lexicon import _INTENS, _PREP_NP, _PREP_VP
from harness.errors import UserError
from tests.helpers import is_base_np, leaves, nodes, parse

CFG = SynthConfig()
LEX = synth.lexicon(CFG)
SRC_AN, TGT_AN = LEX.analyses()
PREP_TGT = {w: t for w, t, _ in _PREP_NP + _PREP_VP}


@pytest.fixture(scope="module")
def sample() -> list[Example]:
    return list(generate(20_000, 11))


def test_same_seed_same_pairs_and_other_seed_other_pairs():
    a, b, c = list(generate(300, 5)), list(generate(300, 5)), list(generate(300, 6))
    assert a == b
    assert sum(x != y for x, y in zip(a, c)) > 290


def test_small_corpus_is_prefix_of_large_one_and_start_offsets_agree():
    big = list(generate(400, 3))
    assert list(generate(50, 3)) == big[:50]
    assert list(generate(20, 3, start=123)) == big[123:143]


def test_lexicon_depends_only_on_lexicon_seed():
    other = synth.lexicon(replace(CFG, lexicon_seed=1))
    assert synth.lexicon(replace(CFG, p_pp=0.1)).n_src == LEX.n_src  # grammar knobs leave spellings alone
    assert sum(a != b for a, b in zip(other.n_src, LEX.n_src)) > 0.9 * CFG.n_nouns
    assert next(iter(generate(1, 0, replace(CFG, lexicon_seed=1)))) != next(iter(generate(1, 0)))


def test_trees_are_well_formed_and_their_leaves_are_the_source(sample):
    labels = Counter()
    for ex in sample[:3000]:
        t = parse(ex.tree)
        assert leaves(t) == ex.src.split()
        assert t[0] == "S" and t[1][-1] == (".", ["."])
        assert ex.src.endswith(" .") and ex.tgt.endswith(" .") and "  " not in ex.tgt
        labels.update(n[0] for n in nodes(t))
    expected = set("S SBAR NP VP PP ADJP ADVP WHNP WDT CC DT NN NNS VBD VBZ VBP JJ IN RB PRP , .".split())
    assert set(labels) == expected  # every label occurs, and no other


def test_lengths_are_in_range(sample):
    src = [len(ex.src.split()) for ex in sample]
    tgt = [len(ex.tgt.split()) for ex in sample]
    assert 15 <= statistics.mean(src) <= 25 and 15 <= statistics.mean(tgt) <= 27
    assert 55 <= max(src) <= CFG.max_len and max(tgt) <= 100


def test_every_content_word_is_translated_once_but_order_changes(sample):
    reordered = 0
    for ex in sample[:3000]:
        s = [SRC_AN[w][:2] for w in ex.src.split() if w in SRC_AN]
        t = [TGT_AN[w][:2] for w in ex.tgt.split() if w in TGT_AN and TGT_AN[w][0] != "REL"]
        assert Counter(s) == Counter(t), ex  # a dictionary mapping, lemma for lemma
        reordered += s != t
    assert reordered > 0.5 * 3000


def test_adjectives_follow_nouns_and_pps_become_postpositions(sample):
    adj_after = adj_before = pp_ok = pp_all = 0
    for ex in sample[:3000]:
        tgt = ex.tgt.split()
        kinds = [TGT_AN.get(w, ("?",))[0] for w in tgt]
        adj_after += sum(a == "N" and b == "J" for a, b in zip(kinds, kinds[1:]))
        adj_before += sum(a == "J" and b == "N" for a, b in zip(kinds, kinds[1:]))
        for node in nodes(parse(ex.tree)):
            if node[0] == "PP" and is_base_np(node[1][1]):
                noun, prep = leaves(node)[-1], leaves(node)[0]
                if sum(SRC_AN.get(w, ())[:2] == SRC_AN[noun][:2] for w in ex.src.split()) != 1:
                    continue
                pp_all += 1
                # the PP's noun, then any adjectives, then the postposition
                i = next(k for k, w in enumerate(tgt) if TGT_AN.get(w, ())[:2] == SRC_AN[noun][:2])
                rest = tgt[i + 1:]
                j = next(k for k, w in enumerate(rest) if TGT_AN.get(w, ("?",))[0] != "J"
                         and w not in {t for _, t in _INTENS})
                pp_ok += rest[j] == PREP_TGT[prep]
    assert adj_after > 1000 and adj_before < adj_after / 20
    assert pp_all > 500 and pp_ok == pp_all


def test_relative_clauses_are_verb_final(sample):
    checked = 0
    for ex in sample:
        tgt = ex.tgt.split()
        rels = [i for i, w in enumerate(tgt) if TGT_AN.get(w, ("",))[0] == "REL"]
        if len(rels) != 1 or "dass" in tgt:
            continue
        end = next(k for k in range(rels[0], len(tgt)) if tgt[k] in (",", "."))
        assert TGT_AN[tgt[end - 1]][0] == "V", ex
        checked += 1
    assert checked > 1000


def test_main_verb_agrees_with_subject_across_a_relative_clause(sample):
    """Subject (NP (NP det noun) (SBAR ...)): the V2 main verb must carry the noun's gender and number,
    which the source never shows (gender is a property of the target noun only)."""
    genders, checked = Counter(), 0
    for ex in sample:
        top = parse(ex.tree)
        subj, vp = top[1][0], top[1][1]
        if not (subj[0] == "NP" and len(subj[1]) == 2 and subj[1][1][0] == "SBAR"
                and is_base_np(subj[1][0]) and [k[0] for k in subj[1][0][1]][:1] == ["DT"]
                and len(subj[1][0][1]) == 2 and vp[0] == "VP"):
            continue
        verb = next(leaves(k)[0] for k in vp[1] if k[0].startswith("VB"))
        tgt = ex.tgt.split()
        _, noun, sense, pl = TGT_AN[tgt[1]]  # det noun , rel-clause ... , VERB
        hits = [i for i, w in enumerate(tgt) if TGT_AN.get(w, ())[:2] == ("V", SRC_AN[verb][1])]
        if len(hits) != 1:
            continue
        _, _, _, _, g, vpl = TGT_AN[tgt[hits[0]]]
        assert (g, vpl) == (LEX.n_gender[noun][sense], pl), ex
        assert hits[0] >= 5  # the relative clause sits between subject and verb
        genders[g] += 1
        checked += 1
    assert checked > 200 and len(genders) == 3


def test_ambiguous_verbs_follow_object_animacy_even_across_a_gap(sample):
    near = far = 0
    senses = Counter()
    for ex in sample:
        src = ex.src.split()
        tgt_by_lemma = {TGT_AN[w][:2]: TGT_AN[w] for w in ex.tgt.split() if w in TGT_AN}
        for node in nodes(parse(ex.tree)):
            kids = node[1]
            if node[0] == "VP" and len(kids) >= 2 and kids[0][0].startswith("VB") and is_base_np(kids[1]):
                verb, noun = kids[0][1][0], leaves(kids[1])[-1]  # verb + its object
            elif (node[0] == "NP" and len(kids) == 2 and is_base_np(kids[0]) and kids[1][0] == "SBAR"
                  and [k[0] for k in kids[1][1][1][1]] == ["NP", "VP"]
                  and not any(k[0] == "NP" for k in kids[1][1][1][1][1][1])):
                # object-gap relative clause: the object is the antecedent, to the left of the subject
                verb = next(leaves(k)[0] for k in kids[1][1][1][1][1][1] if k[0].startswith("VB"))
                noun = leaves(kids[0])[-1]
            else:
                continue
            v = SRC_AN[verb][1]
            if not LEX.v_amb[v] or sum(SRC_AN.get(w, ())[:2] == ("V", v) for w in src) != 1:
                continue
            sense = tgt_by_lemma[("V", v)][2]
            assert sense == (0 if LEX.n_anim[SRC_AN[noun][1]] else 1), ex
            senses[sense] += 1
            if node[0] == "VP":
                near += 1
            else:
                far += 1
    assert near > 100 and far > 20 and len(senses) == 2


def test_ambiguous_nouns_follow_their_first_adjective(sample):
    spellings: dict[int, set[str]] = {}
    checked = 0
    for ex in sample:
        tgt = ex.tgt.split()
        for node in nodes(parse(ex.tree)):
            if not is_base_np(node) or len(node[1]) < 2 or node[1][-2][0] not in ("JJ", "ADJP"):
                continue
            noun = SRC_AN[node[1][-1][1][0]][1]
            first_adj = next(w for w in leaves(node) if SRC_AN.get(w, ("",))[0] == "J")
            hits = [TGT_AN[w] for w in tgt if TGT_AN.get(w, ())[:2] == ("N", noun)]
            if not LEX.n_amb[noun] or len(hits) != 1:
                continue
            assert hits[0][2] == LEX.a_bit[SRC_AN[first_adj][1]], ex
            spellings.setdefault(noun, set()).add(LEX.n_tgt[noun][hits[0][2]][0])
            checked += 1
    assert checked > 200
    assert sum(len(s) == 2 for s in spellings.values()) > 20  # same source word, two translations


def test_lexicon_is_zipfian_and_large(sample):
    nouns = Counter(SRC_AN[w][1] for ex in sample for w in ex.src.split() if SRC_AN.get(w, ("",))[0] == "N")
    ranked = [c for _, c in nouns.most_common()]
    assert ranked[0] > 30 * ranked[99]
    src_types = {w for ex in sample for w in ex.src.split()}
    tgt_types = {w for ex in sample for w in ex.tgt.split()}
    assert len(src_types) > 3000 and len(tgt_types) > len(src_types)  # the target inflects more
    assert not src_types & set(TGT_AN)  # source and target spell every lemma differently
    assert any(ord(ch) > 127 for w in tgt_types for ch in w)


def test_write_corpus_layout_reuse_and_errors(tmp_path):
    out = tmp_path / "corpus"
    manifest = write_corpus(out, 300, 40, 30, seed=2)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"{s}.{k}" for s in ("train", "dev", "test") for k in ("src", "tgt", "tree")]
                           + ["manifest.json"])
    for split, n in (("train", 300), ("dev", 40), ("test", 30)):
        for kind in ("src", "tgt", "tree"):
            data = (out / f"{split}.{kind}").read_bytes()
            assert data.endswith(b"\n") and b"\r" not in data and data.count(b"\n") == n
            data.decode("utf-8")
        assert manifest["splits"][split]["pairs"] == n
    train = [ex.src for ex in generate(300, 2)]
    assert (out / "train.src").read_text(encoding="utf-8").splitlines() == train
    dev = (out / "dev.src").read_text(encoding="utf-8").splitlines()
    assert dev != train[:40]  # dev comes from its own stream
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8")) == manifest
    assert manifest["seed"] == 2 and manifest["cfg"]["n_nouns"] == CFG.n_nouns
    assert manifest["splits"]["train"]["src_types"] > 500 and manifest["splits"]["train"]["mean_src_len"] > 10
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"]  # no temp dir left behind

    stamp = (out / "train.src").stat().st_mtime_ns
    assert write_corpus(out, 300, 40, 30, seed=2) == manifest  # same request: reused, not rewritten
    assert (out / "train.src").stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="other settings"):
        write_corpus(out, 300, 40, 30, seed=3)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        write_corpus(tmp_path / "junk", 10, 5, 5, seed=0)
    (tmp_path / "empty").mkdir()
    assert write_corpus(tmp_path / "empty", 10, 5, 5, seed=0)["sizes"]["train"] == 10


@pytest.mark.parametrize("call", [
    lambda: generate(0, 1),
    lambda: generate(10_000_001, 1),
    lambda: generate(10, -1),
    lambda: generate(10, True),
    lambda: generate(10, 1, replace(CFG, p_pp=1.5)),
    lambda: generate(10, 1, replace(CFG, n_nouns=3)),
    lambda: write_corpus("/tmp/never-made-by-tests", 0, 1, 1, seed=0),
    lambda: write_corpus("/tmp/never-made-by-tests", 10, 1, 1, seed=-2),
])
def test_bad_arguments_raise_user_error(call):
    with pytest.raises(UserError) as err:
        call()
    assert str(err.value).endswith(".") and len(str(err.value).splitlines()) == 1


def test_write_corpus_two_writers_race(tmp_path, monkeypatch):
    """Two processes asked for the same new corpus both generate it; the one that finishes second finds the
    other's finished directory where its own goes and uses that, without an error or a temp dir left."""
    import harness.data.synth.corpus as synth
    out = tmp_path / "corpus"
    theirs = write_corpus(out, 50, 10, 10, seed=4)        # the other writer, already done
    real = synth._existing
    calls = []

    def first_look_missed(path, request):                  # our first look came before theirs finished
        calls.append(path)
        return None if len(calls) == 1 else real(path, request)
    monkeypatch.setattr(synth, "_existing", first_look_missed)
    assert write_corpus(out, 50, 10, 10, seed=4) == theirs
    assert len(calls) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_data_lexicon_seed_reaches_the_words_and_keeps_the_default_corpus_where_it_was(tmp_path):
    from harness.data.corpus import DataConfig
    from harness.data.synth import synth_corpus_dir
    base = DataConfig(train_pairs=40, dev_pairs=5, test_pairs=5, seed=3, lexicon_scale=0.05, max_depth=2,
                      max_words=12, cache_dir=str(tmp_path))
    default, other = synth_corpus_dir(base), synth_corpus_dir(replace(base, lexicon_seed=7))
    assert default.name == "synth-40-5-5-s3-lex0.05-d2-w12" and other.name == default.name + "-L7"
    words = lambda root, side: {w for line in (root / f"train.{side}").read_text().split("\n") for w in line.split()}  # noqa: E731
    # The same sentences (seed 3) in other made-up words: what stays shared is punctuation and the grammar's
    # own closed-class words (the target's determiners and pronouns), not the lexicon's.
    for side in ("src", "tgt"):
        a, b = words(default, side), words(other, side)
        assert len(a & b) < 0.3 * len(a), side
    # the trees keep their shape: the lexicon seed changes spellings, not the grammar's draws
    shape = lambda root: [" ".join(t for t in line.split() if t.startswith("(") or t.endswith(")"))  # noqa: E731
                          for line in (root / "train.tree").read_text().splitlines()[:5]]
    assert len(shape(default)) == len(shape(other)) == 5
