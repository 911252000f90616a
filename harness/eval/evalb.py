"""Bracketing F1 exactly as EVALB (Sekine & Collins, evalb.c) computes it with COLLINS.prm.

What evalb.c does, and this module reproduces:
  * Reading (read_line): files are split into lines at "\\n" only (fgets), and \\r \\f \\v are spaces.
    "(X w)" is a terminal, and so is "(X )" (a terminal with an empty word), while "(X)" is an empty
    bracket. Several trees on one line are read as one forest. A terminal whose label is in DELETE_LABEL
    (exact string compare: -NONE-, and the punctuation tags , : `` '' .) is dropped with its word before
    anything else, so spans count only the remaining words. Every other bracket spans the remaining words
    under it; one left open keeps the end -1 (so it matches and crosses nothing) and makes the line an Error
    ("too many open bracket") that evalb.c still scores and prints, but leaves out of the totals.
  * Length ("Len." and the len<=40 split) is counted on the GOLD tree and drops only
    DELETE_LABEL_FOR_LENGTH (-NONE-): punctuation still counts towards the 40.
  * Status per sentence, checked in this order: test has no (remaining) word -> Skip; word counts differ
    -> Error "Length unmatch"; a word differs -> Error "Words unmatch". Skip and Error sentences add
    nothing to the bracket, crossing or tagging totals (they still count in "Number of sentence").
  * Brackets: an empty span (e.g. an NP that only covered a trace) is deleted; the label is cut at the
    first '-' or '=' (NP-SBJ-1 -> NP, NP=2 -> NP); labels in DELETE_LABEL (TOP) are deleted;
    ADVP and PRT compare equal (EQ_LABEL). Preterminals are never brackets. PTB's empty root label
    "( (S ...))" is NOT in DELETE_LABEL, so EVALB counts it as a bracket; so do we.
  * Matching: each gold bracket takes the first unused test bracket with the same span and label, so
    duplicates (a unary NP over NP) match at most once each: a multiset intersection.
  * Crossing: a test bracket counts once if it crosses at least one gold bracket.
  * Tagging: POS of each remaining test word equals the gold one.
  * Complete match: gold brackets == test brackets == matched (so a sentence with no brackets matches).
Deliberate differences, all on inputs where evalb.c misbehaves:
  * evalb.c exits without a summary at its 12th error message (MAX_ERROR 10); we score and report all.
  * evalb.c prints nan for F when P + R = 0; we report 0.
  * A test line evalb.c cannot read (a word beside another word or outside "(X w)", a ')' with nothing
    open) counts as Error, or as Skip when it has no "(TAG word)" at all (evalb.c checks "no words" first),
    with a zero row. evalb.c loops on such lines until MAX_ERROR, or reads out of bounds.
  * A GOLD line with any reading error raises UserError (evalb.c counts an Error sentence): the reference
    must be readable. So do test and gold files of different lengths (evalb.c scores the common part).
Checked against the real evalb.c on tests/fixtures/evalb (71 sentences, every row and summary figure).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from harness.data.trees import read_lines, read_tree_texts
from harness.errors import UserError

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
DELETE_FOR_LENGTH = frozenset({"-NONE-"})
EQ_LABELS = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT, mapped to one representative
CUTOFF_LEN = 40
# evalb.c's Status column. Its header comment says "1: skip, 2: error", but the code does the opposite:
# Error() sets 1 and counts it as an error, an empty test sets 2 and counts it as a skip.
OK, ERROR, SKIP = 0, 1, 2
_TERMINAL = re.compile(r"\(([^\s()]+)\s+[^\s()]+\)")
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, which evalb.c runs in


def _canon(label: str) -> str:
    return EQ_LABELS.get(label, label)


def _is_terminator(c: str) -> bool:
    return c in _C_SPACE or c in "()"


class _Unreadable(Exception):
    """A line evalb.c cannot read at all (it loops on it until MAX_ERROR and exits, or reads out of bounds)."""


def _read_line(text: str) -> tuple[list[tuple[str, str]], list[tuple[int, int, str]], int, str | None]:
    """evalb.c's read_line() plus massage_data(), character by character.

    Returns (kept (word, tag) terminals, kept (start, end, label) brackets, EVALB length, error or None).
    As in evalb.c: "(X w)" is a terminal and so is "(X )" (a terminal with an empty word), while "(X)" is
    an empty bracket; several trees on one line are read as one forest; a bracket left open keeps end -1
    (it then matches and crosses nothing) and the line gets the error "too many open bracket".
    Raises _Unreadable where evalb.c gives up: a word that is not alone in "(X w)" or stands outside any
    "(X w)", and a ')' with nothing open.
    """
    terms: list[tuple[str, str]] = []
    raw: list[list] = []  # [start, end, label], in opening order as evalb.c numbers them
    stack: list[int] = []
    length = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _C_SPACE:
            i += 1
        elif c == "(":
            j = i + 1
            while j < n and not _is_terminator(text[j]):
                j += 1
            label = text[i + 1:j]
            if j < n and text[j] in _C_SPACE:
                q = j
                while q < n and text[q] in _C_SPACE:
                    q += 1
                k = q
                while k < n and not _is_terminator(text[k]):
                    k += 1
                if k < n and text[k] == ")":  # a terminal, possibly with an empty word: "(X )"
                    length += label not in DELETE_FOR_LENGTH
                    if label not in DELETE_LABELS:
                        terms.append((text[q:k], label))
                    i = k + 1
                    continue
                if k > q or k == n:
                    raise _Unreadable("More than two elements in a bracket")
            raw.append([len(terms), -1, label])
            stack.append(len(raw) - 1)
            i = j
        elif c == ")":
            if not stack:
                raise _Unreadable("Bracketing unbalance (too many close bracket)")
            raw[stack.pop()][1] = len(terms)
            i += 1
        else:
            raise _Unreadable("Reading sentence")
    brackets = []
    for start, end, label in raw:
        label = re.split(r"[-=]", label, maxsplit=1)[0]
        if start != end and label not in DELETE_LABELS:  # an empty span ("zero element") is deleted
            brackets.append((start, end, _canon(label)))
    return terms, brackets, length, "Bracketing is unbalanced (too many open bracket)" if stack else None


def _crosses(a: tuple[int, int, str], b: tuple[int, int, str]) -> bool:
    return a[0] < b[0] < a[1] < b[1] or b[0] < a[0] < b[1] < a[1]


def _score_sentence(n: int, gold: tuple, test_text: str) -> dict:
    g_terms, g_br, length = gold
    sent = {"id": n, "length": length, "status": OK, "recall": 0.0, "precision": 0.0, "matched": 0,
            "gold_brackets": 0, "test_brackets": 0, "crossing": 0, "words": 0, "correct_tags": 0,
            "tag_accuracy": 0.0, "error": None}
    try:
        t_terms, t_br, _, read_error = _read_line(test_text)
    except _Unreadable as exc:
        # evalb.c tests "no words" before anything else, so an unreadable line without words is a Skip.
        has_words = any(m.group(1) not in DELETE_LABELS for m in _TERMINAL.finditer(test_text))
        return {**sent, "status": ERROR if has_words else SKIP, "error": f"Reading test tree: {exc}"}
    if not t_terms:
        return {**sent, "status": SKIP}
    if len(g_terms) != len(t_terms):
        return {**sent, "status": ERROR, "error": f"Length unmatch ({len(g_terms)}|{len(t_terms)})"}
    for (gw, _), (tw, _) in zip(g_terms, t_terms):
        if gw != tw:
            return {**sent, "status": ERROR, "error": f"Words unmatch ({gw}|{tw})"}
    matched = sum((Counter(g_br) & Counter(t_br)).values())
    crossing = sum(any(_crosses(g, t) for g in g_br) for t in t_br)
    correct = sum(_canon(gt) == _canon(tt) for (_, gt), (_, tt) in zip(g_terms, t_terms))
    # An unbalanced but otherwise readable line is still scored and printed, as evalb.c does, but it is
    # an Error sentence, so it adds nothing to the totals.
    return {**sent, "status": ERROR if read_error else OK, "error": read_error,
            "recall": 100.0 * matched / len(g_br) if g_br else 0.0,
            "precision": 100.0 * matched / len(t_br) if t_br else 0.0, "matched": matched,
            "gold_brackets": len(g_br), "test_brackets": len(t_br), "crossing": crossing,
            "words": len(g_terms), "correct_tags": correct, "tag_accuracy": 100.0 * correct / len(g_terms)}


def _summarize(sents: list[dict]) -> dict:
    valid = [s for s in sents if s["status"] == OK]
    tot = {k: sum(s[k] for s in valid) for k in ("matched", "gold_brackets", "test_brackets", "crossing",
                                                   "words", "correct_tags")}
    r = 100.0 * tot["matched"] / tot["gold_brackets"] if tot["gold_brackets"] else 0.0
    p = 100.0 * tot["matched"] / tot["test_brackets"] if tot["test_brackets"] else 0.0
    nv = len(valid)
    return {
        "sentences": len(sents),
        "error_sentences": sum(s["status"] == ERROR for s in sents),
        "skip_sentences": sum(s["status"] == SKIP for s in sents),
        "valid_sentences": nv,
        "recall": r,
        "precision": p,
        "fmeasure": 2 * p * r / (p + r) if p + r else 0.0,
        "complete_match": 100.0 * sum(s["matched"] == s["gold_brackets"] == s["test_brackets"] for s in valid) / nv
        if nv else 0.0,
        "average_crossing": tot["crossing"] / nv if nv else 0.0,
        "no_crossing": 100.0 * sum(s["crossing"] == 0 for s in valid) / nv if nv else 0.0,
        "two_or_less_crossing": 100.0 * sum(s["crossing"] <= 2 for s in valid) / nv if nv else 0.0,
        "tagging_accuracy": 100.0 * tot["correct_tags"] / tot["words"] if tot["words"] else 0.0,
        **tot,
    }


def _score(gold: list[tuple[str, str]], test: list[str]) -> dict:
    """gold: (where, text) pairs, `where` naming the input for error messages; test: one text per sentence."""
    sents = []
    for n, ((where, g_text), t_text) in enumerate(zip(gold, test), 1):
        try:
            g_terms, g_br, length, error = _read_line(g_text)
        except _Unreadable as exc:
            error = str(exc)
        if error:  # evalb.c would count an Error sentence; a reference we cannot read is the user's to fix
            raise UserError(f"{where}: cannot read the gold tree ({error}); expected one bracketed tree "
                            "such as (S (NP (DT the) (NN dog)) (VP (VBZ runs))).")
        sents.append(_score_sentence(n, (g_terms, g_br, length), t_text))
    return {"cutoff_len": CUTOFF_LEN,
            "summary": {"all": _summarize(sents),
                        f"len<={CUTOFF_LEN}": _summarize([s for s in sents if s["length"] <= CUTOFF_LEN])},
            "sentences": sents}


def score_trees(gold: list[str], test: list[str]) -> dict:
    """Score parallel lists of tree strings (a test entry may be "" for a failed parse)."""
    if len(gold) != len(test):
        raise UserError(f"score_trees got {len(gold)} gold trees and {len(test)} test trees; "
                        "give one test tree (or an empty string) per gold tree.")
    return _score([(f"gold tree {i}", g) for i, g in enumerate(gold, 1)], list(test))


def score_file(gold_path: str | Path, test_path: str | Path) -> dict:
    """Gold: one tree per line or PTB .mrg style. Test: one tree per line, as EVALB reads it."""
    gold = read_tree_texts(gold_path)
    try:
        test = read_lines(test_path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"Cannot read test file {test_path} ({exc}); give a UTF-8 file with one tree per line.")
    if len(gold) != len(test):
        raise UserError(f"{test_path}:{len(test)}: the test file has {len(test)} lines but {gold_path} has "
                        f"{len(gold)} trees; give exactly one test line (empty for a failed parse) per gold tree.")
    return _score([(f"{gold_path}:{line}", text) for line, text in gold], test)


def format_summary(result: dict, per_sentence: bool = True) -> str:
    """EVALB's printout: per-sentence table, totals line, and the All / len<=N summary blocks."""
    out = []
    if per_sentence:
        out += ["  Sent.                        Matched  Bracket   Cross        Correct Tag",
                " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
                "=" * 76]
        for s in result["sentences"]:
            out.append(f"{s['id']:4d}  {s['length']:3d}    {s['status']:d}  {s['recall']:6.2f} {s['precision']:6.2f}"
                       f"   {s['matched']:3d}    {s['gold_brackets']:3d}  {s['test_brackets']:3d}"
                       f"    {s['crossing']:3d}   {s['words']:4d}  {s['correct_tags']:4d}   {s['tag_accuracy']:6.2f}")
        a = result["summary"]["all"]
        line = ""
        if a["gold_brackets"] > 0 and a["test_brackets"] > 0:  # evalb.c prints these columns only then
            line = (f"                {a['recall']:6.2f} {a['precision']:6.2f} {a['matched']:6d} "
                    f"{a['gold_brackets']:5d} {a['test_brackets']:5d}  {a['crossing']:5d}")
        out += ["=" * 76, line + f"  {a['words']:5d} {a['correct_tags']:5d}   {a['tagging_accuracy']:6.2f}"]
    out.append("=== Summary ===")
    rows = [("Number of sentence", "sentences", "d"), ("Number of Error sentence", "error_sentences", "d"),
            ("Number of Skip  sentence", "skip_sentences", "d"), ("Number of Valid sentence", "valid_sentences", "d"),
            ("Bracketing Recall", "recall", ".2f"), ("Bracketing Precision", "precision", ".2f"),
            ("Bracketing FMeasure", "fmeasure", ".2f"), ("Complete match", "complete_match", ".2f"),
            ("Average crossing", "average_crossing", ".2f"), ("No crossing", "no_crossing", ".2f"),
            ("2 or less crossing", "two_or_less_crossing", ".2f"), ("Tagging accuracy", "tagging_accuracy", ".2f")]
    for title, block in (("All", "all"), (f"len<={result['cutoff_len']}", f"len<={result['cutoff_len']}")):
        out += ["", f"-- {title} --"]
        out += [f"{name:<26}= {result['summary'][block][key]:6{fmt}}" for name, key, fmt in rows]
    return "\n".join(out) + "\n"


def main(gold: str, test: str, as_json: bool = False) -> int:
    """`python -m harness probe evalb GOLD TEST [--json]`: print EVALB's report (or JSON); errors to stderr."""
    result = score_file(gold, test)
    for s in result["sentences"]:
        if s["error"]:
            print(f"{s['id']} : {s['error']}", file=sys.stderr)
    sys.stdout.write(json.dumps(result, indent=1) + "\n" if as_json else format_summary(result))
    return 0
