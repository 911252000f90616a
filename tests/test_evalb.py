"""EVALB (COLLINS.prm) scoring and the Vinyals linearization, on hand-worked cases.

Brackets are written label[start,end) over the words left after deleting -NONE- and punctuation.
"""

import json
import re
from pathlib import Path

import pytest

from harness.data.trees import delinearize, linearize, parse_tree, read_trees
from harness.errors import UserError
from harness.eval.evalb import format_summary, main, score_file, score_trees

DOG = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))"


def _all(gold, test):
    return score_trees(gold, test)["summary"]["all"]


def test_identical_trees_score_100():
    # S[0,3) NP[0,2) VP[2,3): 3 gold, 3 test, 3 matched; the '.' is deleted so 3 words, but Len. is 4.
    res = score_trees([DOG], [DOG])
    a, s = res["summary"]["all"], res["sentences"][0]
    assert (a["matched"], a["gold_brackets"], a["test_brackets"]) == (3, 3, 3)
    assert a["recall"] == a["precision"] == a["fmeasure"] == a["complete_match"] == a["tagging_accuracy"] == 100.0
    assert (s["words"], s["length"]) == (3, 4)


def test_wrong_label():
    # VP[2,3) becomes ADJP[2,3): matched 2 of 3 each way -> R = P = F = 66.67; tags all right.
    a = _all([DOG], ["(S (NP (DT the) (NN dog)) (ADJP (VBZ barks)) (. .))"])
    assert a["matched"] == 2
    assert round(a["recall"], 2) == round(a["precision"], 2) == round(a["fmeasure"], 2) == 66.67
    assert a["complete_match"] == 0.0 and a["tagging_accuracy"] == 100.0


def test_wrong_span():
    # gold S[0,4) NP[0,2) VP[2,4) ADVP[3,4); test S[0,4) NP[0,3) VP[3,4) ADVP[3,4).
    # matched S, ADVP = 2 of 4 -> R = P = 50; test NP[0,3) crosses gold VP[2,4) -> 1 crossing.
    gold = "(S (NP (DT the) (NN dog)) (VP (VBZ barks) (ADVP (RB loudly))))"
    test = "(S (NP (DT the) (NN dog) (VBZ barks)) (VP (ADVP (RB loudly))))"
    a = _all([gold], [test])
    assert (a["matched"], a["recall"], a["precision"], a["crossing"]) == (2, 50.0, 50.0, 1)


def test_unary_chain_duplicates_match_once_each():
    # gold S[0,2) NP[0,1) NP[0,1) VP[1,2) = 4; test S NP VP = 3; only one NP can match -> 3.
    # R = 3/4 = 75, P = 3/3 = 100, F = 2*75*100/175 = 85.71. Swapped: R = 100, P = 75.
    double, single = "(S (NP (NP (NN x))) (VP (VB y)))", "(S (NP (NN x)) (VP (VB y)))"
    a = _all([double], [single])
    assert (a["matched"], a["recall"], a["precision"], round(a["fmeasure"], 2)) == (3, 75.0, 100.0, 85.71)
    b = _all([single], [double])
    assert (b["recall"], b["precision"]) == (100.0, 75.0)
    assert _all([double], [double])["matched"] == 4


def test_punctuation_deletion_changes_spans():
    # The comma is deleted before spans are taken: gold NP[0,1) and test NP covering "John ," -> NP[0,1).
    # 3/3 matched -> 100; words = 2 but Len. = 3 (punctuation counts for length).
    gold = "(S (NP (NNP John)) (, ,) (VP (VBD left)))"
    test = "(S (NP (NNP John) (, ,)) (VP (VBD left)))"
    res = score_trees([gold], [test])
    assert res["summary"]["all"]["fmeasure"] == 100.0
    assert (res["sentences"][0]["words"], res["sentences"][0]["length"]) == (2, 3)


def test_function_tags_and_indices_stripped():
    # NP-SBJ-1 -> NP, ADVP-TMP -> ADVP, NP=2 -> NP: S NP VP ADVP NP all match, 5/5.
    gold = "(S (NP-SBJ-1 (PRP He)) (VP (VBD ran) (ADVP-TMP (RB yesterday)) (NP=2 (NN home))))"
    test = "(S (NP (PRP He)) (VP (VBD ran) (ADVP (RB yesterday)) (NP (NN home))))"
    a = _all([gold], [test])
    assert (a["matched"], a["gold_brackets"], a["fmeasure"]) == (5, 5, 100.0)


def test_traces_removed_and_empty_constituent_disappears():
    # (-NONE- *-1) is deleted with its word, leaving NP-SBJ empty -> deleted too.
    # gold S[0,4) NP[0,1) VP[1,4) S[2,4) VP[2,4) VP[3,4) = 6 = test; 6 matched. Len. = 4 (no trace).
    gold = ("(S (NP-SBJ (NNP John)) (VP (VBD wanted) (S (NP-SBJ (-NONE- *-1)) "
            "(VP (TO to) (VP (VB leave))))) (. .))")
    test = "(S (NP (NNP John)) (VP (VBD wanted) (S (VP (TO to) (VP (VB leave))))) (. .))"
    res = score_trees([gold], [test])
    a = res["summary"]["all"]
    assert (a["matched"], a["gold_brackets"], a["test_brackets"], a["fmeasure"]) == (6, 6, 6, 100.0)
    assert (res["sentences"][0]["length"], res["sentences"][0]["words"]) == (5, 4)


def test_advp_and_prt_are_equal():
    # EQ_LABEL ADVP PRT: PRT[2,3) matches ADVP[2,3); 4/4.
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    test = "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up))))"
    assert _all([gold], [test])["fmeasure"] == 100.0


def test_top_removed_but_empty_root_label_counts():
    # TOP is a DELETE_LABEL: 3/3. PTB's empty root "( (S ...))" is not, so EVALB counts a ""[0,2)
    # bracket: gold 4, test 3, matched 3 -> R = 75, P = 100.
    plain = "(S (NP (NN it)) (VP (VBZ works)))"
    assert _all([f"(TOP {plain})"], [plain])["fmeasure"] == 100.0
    a = _all([f"( {plain})"], [plain])
    assert (a["gold_brackets"], a["recall"], a["precision"]) == (4, 75.0, 100.0)


def test_empty_and_unreadable_test_lines():
    # Sentence 1 valid (3/3); 2 empty -> Skip; 3 unbalanced but has words -> Error; 4 "(S (NP" has no
    # word -> Skip (evalb.c checks "no words" first). Totals come from sentence 1 only.
    res = score_trees([DOG] * 4, [DOG, "", "(S (NP (DT the) (NN dog)", "(S (NP"])
    a = res["summary"]["all"]
    assert [s["status"] for s in res["sentences"]] == [0, 2, 1, 2]
    assert (a["sentences"], a["error_sentences"], a["skip_sentences"], a["valid_sentences"]) == (4, 1, 2, 1)
    assert (a["gold_brackets"], a["fmeasure"]) == (3, 100.0)
    # Nothing valid at all: EVALB prints nan for F; we give 0.
    b = _all([DOG], [""])
    assert (b["skip_sentences"], b["recall"], b["fmeasure"]) == (1, 0.0, 0.0)


def test_crossing_brackets():
    # Sentence 1: gold S[0,4) NP[0,2) VP[2,4) NP[3,4); test S[0,4) X[0,1) X[1,3) NP[3,4).
    #   X[1,3) crosses NP[0,2) and VP[2,4) but counts once -> 1 crossing; matched S, NP = 2.
    # Sentence 2: gold S[0,8) A[0,2) B[2,4) C[4,6) D[6,8); test E[1,3) F[3,5) G[5,7) each cross -> 3.
    # Average = 4/2 = 2.00, no crossing 0%, 2 or less 1/2 = 50%.
    g1 = "(S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d))))"
    t1 = "(S (X (DT a)) (X (NN b) (VB c)) (NP (NN d)))"
    w = [f"(X {c})" for c in "abcdefgh"]
    g2 = f"(S (A {w[0]} {w[1]}) (B {w[2]} {w[3]}) (C {w[4]} {w[5]}) (D {w[6]} {w[7]}))"
    t2 = f"(S {w[0]} (E {w[1]} {w[2]}) (F {w[3]} {w[4]}) (G {w[5]} {w[6]}) {w[7]})"
    res = score_trees([g1, g2], [t1, t2])
    assert [s["crossing"] for s in res["sentences"]] == [1, 3]
    assert res["sentences"][0]["matched"] == 2
    a = res["summary"]["all"]
    assert (a["average_crossing"], a["no_crossing"], a["two_or_less_crossing"]) == (2.0, 0.0, 50.0)


def test_length_and_word_mismatch_are_error_sentences():
    # Sentence 2 has 3 gold words but 2 test words -> Error "Length unmatch (3|2)"; sentence 3 differs
    # in one word -> Error "Words unmatch". Totals only from sentence 1 (3/3).
    res = score_trees([DOG] * 3, [DOG, "(S (NP (DT the)) (VP (VBZ barks)))",
                                  "(S (NP (DT the) (NN cat)) (VP (VBZ barks)))"])
    a = res["summary"]["all"]
    assert (a["error_sentences"], a["valid_sentences"], a["gold_brackets"], a["fmeasure"]) == (2, 1, 3, 100.0)
    assert res["sentences"][1]["error"] == "Length unmatch (3|2)"
    assert res["sentences"][2]["error"] == "Words unmatch (dog|cat)"


def test_repaired_model_output_scores():
    # "(S (NP XX XX )NP (VP XX XX )VP )S )S" over 3 words: the 4th XX and the last )S are dropped.
    # With POS: identical to gold minus '.' -> 3/3 and tags 3/3. Without POS all tags are XX -> 0/3.
    toks = "(S (NP XX XX )NP (VP XX XX )VP )S )S"  # a str is split on whitespace
    words, pos = ["the", "dog", "barks"], ["DT", "NN", "VBZ"]
    gold = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"
    assert delinearize(toks, words, pos) == gold
    a = _all([gold], [delinearize(toks, words)])
    assert (a["fmeasure"], a["tagging_accuracy"]) == (100.0, 0.0)
    # "(S (NP XX )NP (VP": 2 missing XX go under the open VP -> S[0,3) NP[0,1) VP[1,3): only S matches.
    b = _all([gold], [delinearize("(S (NP XX )NP (VP", words, pos)])
    assert (b["matched"], round(b["recall"], 2)) == (1, 33.33)


def test_len40_split_uses_gold_length_with_punctuation():
    # A: 40 words + '.' -> Len. 41 (punctuation counts), excluded from len<=40; flat S, matched 1/1.
    # B: gold S NP VP (3), test flat S (1): matched 1. All: R = 2/4 = 50, P = 2/2 = 100.
    # len<=40 (B only): R = 1/3 = 33.33, P = 100.
    a_tree = "(S " + " ".join(f"(NN w{i})" for i in range(40)) + " (. .))"
    b_gold, b_test = "(S (NP (NN a)) (VP (VB b)))", "(S (NN a) (VB b))"
    res = score_trees([a_tree, b_gold], [a_tree, b_test])
    assert res["sentences"][0]["length"] == 41
    al, short = res["summary"]["all"], res["summary"]["len<=40"]
    assert (al["recall"], al["precision"]) == (50.0, 100.0)
    assert (short["sentences"], round(short["recall"], 2), short["precision"]) == (1, 33.33, 100.0)


def test_score_file_reads_mrg_gold_and_checks_line_counts(tmp_path, capsys):
    gold = tmp_path / "gold.mrg"
    gold.write_text("( (S (NP-SBJ (DT the) (NN dog))\n     (VP (VBZ barks))\n     (. .)) )\n\n"
                    "( (S (NP (PRP It)) (VP (VBZ works))) )\n")
    test = tmp_path / "test.txt"
    test.write_text("( (S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .)))\n( (S (NP (PRP It)) (VP (VBZ works))))\n")
    res = score_file(gold, test)
    assert res["summary"]["all"]["fmeasure"] == 100.0 and res["summary"]["all"]["gold_brackets"] == 8
    assert main(str(gold), str(test), as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["all"]["valid_sentences"] == 2
    text = format_summary(res)
    assert "Bracketing FMeasure       = 100.00" in text and "-- len<=40 --" in text
    test.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))\n")
    with pytest.raises(UserError, match="1 lines but .* has 2 trees"):
        score_file(gold, test)
    gold.write_text("(S (NP the dog))\n")
    with pytest.raises(UserError, match=r"gold.mrg:1: cannot read the gold tree"):
        score_file(gold, test)


# ---- against the real EVALB (tests/fixtures/evalb/README.md says how its output was made) ----

FIXTURE = Path(__file__).parent / "fixtures" / "evalb"
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"
                  r"\s+(\d+)\s+(\d+)\s+(\d+\.\d\d)$")
_SUMMARY_KEYS = {"Number of sentence": "sentences", "Number of Error sentence": "error_sentences",
                 "Number of Skip  sentence": "skip_sentences", "Number of Valid sentence": "valid_sentences",
                 "Bracketing Recall": "recall", "Bracketing Precision": "precision",
                 "Bracketing FMeasure": "fmeasure", "Complete match": "complete_match",
                 "Average crossing": "average_crossing", "No crossing": "no_crossing",
                 "2 or less crossing": "two_or_less_crossing", "Tagging accuracy": "tagging_accuracy"}


def _parse_evalb_output(text):
    """Per-sentence rows, the totals line and the summary blocks of evalb's stdout."""
    lines = text.splitlines()
    bars = [i for i, line in enumerate(lines) if line == "=" * 76]
    rows = [_ROW.match(line).groups() for line in lines[bars[0] + 1:bars[1]]]
    totals = lines[bars[1] + 1].split()
    blocks, block = {}, None
    for line in lines[bars[1] + 2:]:
        if line.startswith("-- "):
            block = blocks.setdefault(line.strip("- "), {})
        elif "=" in line and block is not None:
            name, value = line.split("=")
            block[_SUMMARY_KEYS[name.strip()]] = value.strip()
    return rows, totals, blocks


def test_matches_real_evalb_on_fixture():
    gold, test = FIXTURE / "gold.txt", FIXTURE / "test.txt"
    raw = (FIXTURE / "evalb_output.txt").read_text()
    rows, totals, blocks = _parse_evalb_output(raw)
    res = score_file(gold, test)
    assert res == score_trees(gold.read_text().split("\n")[:-1], test.read_text().split("\n")[:-1])
    assert len(rows) == len(res["sentences"]) == 71
    for row, s in zip(rows, res["sentences"]):
        ours = (s["id"], s["length"], s["status"], f"{s['recall']:.2f}", f"{s['precision']:.2f}", s["matched"],
                s["gold_brackets"], s["test_brackets"], s["crossing"], s["words"], s["correct_tags"],
                f"{s['tag_accuracy']:.2f}")
        assert tuple(str(v) for v in ours) == row, f"sentence {s['id']}"
    a = res["summary"]["all"]
    assert totals == [f"{a['recall']:.2f}", f"{a['precision']:.2f}", str(a["matched"]), str(a["gold_brackets"]),
                      str(a["test_brackets"]), str(a["crossing"]), str(a["words"]), str(a["correct_tags"]),
                      f"{a['tagging_accuracy']:.2f}"]
    assert set(blocks) == {"All", "len<=40"}
    for title, key in (("All", "all"), ("len<=40", "len<=40")):
        ours = {k: str(v) if isinstance(v, int) else f"{v:.2f}" for k, v in res["summary"][key].items()
                if k in _SUMMARY_KEYS.values()}
        assert ours == blocks[title], title
    # The fixture covers what it claims: errors, skips, a sentence over 40 words, >2 crossings, a forest.
    assert (blocks["All"]["error_sentences"], blocks["All"]["skip_sentences"]) == ("6", "2")
    assert blocks["len<=40"]["sentences"] == "69" and max(s["crossing"] for s in res["sentences"]) == 4
    assert format_summary(res) == raw


def test_lines_split_like_fgets(tmp_path):
    # evalb.c reads lines with fgets and takes \f, \v and \r for spaces; Python's splitlines() would cut
    # this test file into 4 lines. Real EVALB: both sentences 3/3/3 matched, 0 crossing, 3/3 tags.
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("(S (NP (DT a) (NN b)) (VP (VBZ c)))\n" * 2)
    test.write_bytes(b"(S (NP (DT a)\f(NN b)) (VP\v(VBZ c)))\n(S (NP (DT a) (NN b)) (VP (VBZ c)))\r\n")
    res = score_file(gold, test)
    assert [(s["status"], s["matched"], s["test_brackets"], s["correct_tags"]) for s in res["sentences"]] == \
        [(0, 3, 3, 3)] * 2


# ---- trees.py ----

def test_reader_handles_ptb_labels_and_multiline(tmp_path):
    f = tmp_path / "wsj.mrg"
    f.write_text("( (S \n    (NP-SBJ-1 (PRP$ his) (-LRB- -LRB-) (NN dog))\n    (VP (VBD left)\n"
                 "      (S (NP-SBJ (-NONE- *-1)) ))))\n\n( (S (NP (NN x))))\n")
    trees = read_trees(f)
    assert len(trees) == 2 and trees[0].label == ""
    assert trees[0].pos() == ["PRP$", "-LRB-", "NN", "VBD", "-NONE-"]
    assert str(trees[1]) == "( (S (NP (NN x))))"
    f.write_text("(S (NP (NN x))\n")
    with pytest.raises(UserError, match="never closed"):
        read_trees(f)


def test_linearize_example_and_options():
    tree = "(S (NP (DT the) (NN dog)) (VP (VBZ runs)))"
    assert linearize(tree) == "(S (NP XX XX )NP (VP XX )VP )S"
    assert linearize(tree, pos_as_xx=False) == "(S (NP DT NN )NP (VP VBZ )VP )S"
    assert linearize(tree, tagged=True) == "(S (NP XX/DT XX/NN )NP (VP XX/VBZ )VP )S"
    assert delinearize(linearize(tree, tagged=True), ["the", "dog", "runs"], ["DT", "NN", "VBZ"]) == tree
    assert linearize("( " + tree + ")") == linearize("(TOP " + tree + ")") == linearize(tree)


@pytest.mark.parametrize("tree", [
    "(S (NP (DT the) (NN dog)) (VP (VBZ runs)))",
    "(S (NP (NP (NN x))) (VP (VB y) (PRT (RP up)) (, ,) (NP-SBJ (PRP$ his) (-LRB- -LRB-))))",
    "(NP (NN x))",
])
def test_round_trip(tree):
    t = parse_tree(tree)
    assert delinearize(linearize(t).split(), t.words(), t.pos()) == tree


def test_repair_rules():
    w = ["a", "b", "c"]
    # unmatched closers dropped, closing label ignored, unclosed closed at the end
    assert delinearize(")S (S (NP XX )VP XX XX", w) == "(S (NP (XX a)) (XX b) (XX c))"
    # extra XX dropped
    assert delinearize("(S XX XX XX XX XX )S", w) == "(S (XX a) (XX b) (XX c))"
    # missing XX added under the last open constituent, or the last root when all are closed
    assert delinearize("(S (NP XX )NP (VP XX", w) == "(S (NP (XX a)) (VP (XX b) (XX c)))"
    assert delinearize("(S (NP XX )NP )S", w) == "(S (NP (XX a)) (XX b) (XX c))"
    # empty constituents removed; several roots wrapped in S
    assert delinearize("(NP XX )NP (ADJP )ADJP (VP XX XX )VP", w) == "(S (NP (XX a)) (VP (XX b) (XX c)))"
    # empty output -> flat S; POS used when given; no words -> ""
    assert delinearize([], w) == "(S (XX a) (XX b) (XX c))"
    assert delinearize([], w, ["DT", "NN", "VB"]) == "(S (DT a) (NN b) (VB c))"
    assert delinearize("(S XX )S", []) == ""
    # every repaired output is readable and covers exactly the words
    for toks in [")NP )S", "(S (S (S", "XX XX (VP XX XX XX )VP XX"]:
        assert parse_tree(delinearize(toks, w)).words() == w
