"""BLEU: sacreBLEU wrapper, the Moses tokenizer port, compound splitting and multi-bleu (hand-worked cases;
tests/test_moses_parity.py checks them against the real scripts' outputs)."""

import math

import pytest
from sacrebleu.metrics import BLEU

from harness.errors import UserError
from harness.eval.bleu import (
    copy_baseline_bleu,
    moses_tokenize,
    multi_bleu,
    paper_tokenize,
    replace_unicode_punctuation,
    sacre_bleu,
    split_compounds,
    tokenized_bleu,
)

# ------------------------------------------------------------------------------------------------ sacreBLEU


def test_sacre_bleu_perfect_and_signature():
    refs = ["Das Haus ist klein.", "Wir haben 3,5 Millionen Euro ausgegeben."]
    score, sig = sacre_bleu(list(refs), refs)
    assert score == pytest.approx(100.0)
    assert "tok:13a" in sig and "nrefs:1" in sig and "smooth:exp" in sig and "version:" in sig


def test_sacre_bleu_partial_below_100():
    score, _ = sacre_bleu(["Das Haus ist groß."], ["Das Haus ist klein."])
    assert 0 < score < 100


def test_length_mismatch_and_empty_raise():
    with pytest.raises(UserError, match=r"hypotheses \(1 lines\) and references \(2 lines\)"):
        sacre_bleu(["a"], ["a", "b"])
    with pytest.raises(UserError, match="references: empty list"):
        tokenized_bleu([], [])
    with pytest.raises(UserError, match=r"sources \(2 lines\)"):
        copy_baseline_bleu(["a", "b"], ["a"])


def test_copy_baseline():
    srcs = ["Angela Merkel met Barack Obama in Berlin on 3 May 2014 .", "The house is small ."]
    refs = ["Angela Merkel traf Barack Obama am 3. Mai 2014 in Berlin .", "Das Haus ist klein ."]
    score, sig = copy_baseline_bleu(srcs, refs)
    assert (score, sig) == sacre_bleu(srcs, refs)
    assert 0 < score < 30  # names and numbers match, the rest does not
    assert copy_baseline_bleu(refs, refs)[0] == pytest.approx(100.0)


# ------------------------------------------------------------------------------------------- tokenizer

@pytest.mark.parametrize("raw, tok", [
    # punctuation is split off; a final period is split; a comma between words is split
    ("Hallo, Welt! Wie geht es (dir)?", "Hallo , Welt ! Wie geht es ( dir ) ?"),
    # German quotes are tokens of their own; “ is first mapped to " (then escaped as &quot;)
    ("Er sagte: „Ja.“", "Er sagte : „ Ja . &quot;"),
    # numbers: thousands comma and decimal dot stay inside; a comma after a number at the end splits
    ("Es kostet 1,000.50 Euro bzw. 3,5% mehr, d.h. 5,", "Es kostet 1,000.50 Euro bzw. 3,5 % mehr , d.h. 5 ,"),
    # German ordinals and abbreviations keep their period (nonbreaking prefixes), other words do not
    ("Am 3. Oktober kam Dr. Meier, z.B. hier. Dann ging er.", "Am 3. Oktober kam Dr. Meier , z.B. hier . Dann ging "
                                                              "er ."),
    # before a lowercase word a period is kept (looks like an abbreviation); the last word always splits
    ("Abb. zeigt usw.", "Abb. zeigt usw ."),
    # -l de splits every apostrophe (no English clitics), escaped as &apos;
    ("Wie geht's dir", "Wie geht &apos; s dir"),
    # runs of dots stay together; whitespace and control characters are normalized
    ("Nun...ja\t \x01 gut ..", "Nun ... ja gut .."),
    # hyphens are not split by the tokenizer itself (no -a)
    ("E-Mail-Adresse - ok", "E-Mail-Adresse - ok"),
    # XML escaping of & | < > [ ]
    ("a<b & [c] | d", "a &lt; b &amp; &#91; c &#93; &#124; d"),
    # whitespace-only lines come back unchanged, as tokenizer.perl prints them (Unicode whitespace too)
    ("   ", "   "),
    ("\u3000", "\u3000"),
])
def test_moses_tokenize(raw, tok):
    assert moses_tokenize(replace_unicode_punctuation(raw)) == tok


def test_moses_tokenize_no_escape():
    assert moses_tokenize('Sie sagte "geht\'s" & ging.', escape=False) == 'Sie sagte " geht \' s " & ging .'


def test_replace_unicode_punctuation():
    assert replace_unicode_punctuation("“Ja” – sie’s…（ok）") == "\"Ja\" – sie's...(ok)"
    assert replace_unicode_punctuation("„Ja“") == '„Ja"'  # „ is not mapped by the Moses script


def test_split_compounds():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("E-Mail-Adresse") == "E ##AT##-##AT## Mail ##AT##-##AT## Adresse"
    # Perl's non-overlapping /g: the middle "b" is consumed by the first match, so "b-c" is left alone
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("Preis - 5 , -5 , 5-") == "Preis - 5 , -5 , 5-"


def test_paper_tokenize_pipeline():
    assert paper_tokenize("Die „E-Mail“ kam – 3. Mal.") == "Die „ E ##AT##-##AT## Mail &quot; kam – 3. Mal ."


# ------------------------------------------------------------------------------------------- multi-bleu

def test_multi_bleu_hand_worked():
    # hyp "the cat sat on the mat" (c = 6), ref "the cat sat on the red mat" (r = 7)
    #   1-grams: the x2, cat, sat, on, mat all in ref (ref has "the" x2)     -> p1 = 6/6
    #   2-grams: the cat, cat sat, sat on, on the match; the mat does not  -> p2 = 4/5
    #   3-grams: the cat sat, cat sat on, sat on the match; on the mat not -> p3 = 3/4
    #   4-grams: the cat sat on, cat sat on the match; sat on the mat not  -> p4 = 2/3
    #   BP = exp(1 - 7/6) = 0.8465; BLEU = BP * (1 * 4/5 * 3/4 * 2/3) ** (1/4) = 0.8465 * 0.7953 = 67.32
    result = multi_bleu(["the cat sat on the mat"], ["the cat sat on the red mat"])
    assert result.score == pytest.approx(100 * math.exp(-1 / 6) * 0.4 ** 0.25, abs=1e-9)
    assert result.precisions == pytest.approx((100.0, 80.0, 75.0, 100 * 2 / 3))
    assert (result.hyp_len, result.ref_len, result.bp) == (6, 7, pytest.approx(math.exp(-1 / 6)))
    assert str(result) == "BLEU = 67.32, 100.0/80.0/75.0/66.7 (BP=0.846, ratio=0.857, hyp_len=6, ref_len=7)"


def test_multi_bleu_is_corpus_level():
    # Sentence 2 alone has no 3- or 4-grams (BLEU 0), but counts are summed over the corpus:
    #   p1 = (4+2)/(4+2), p2 = (3+1)/(3+1), p3 = 2/2, p4 = 1/1; c = 6, r = 4+4 = 8
    #   BLEU = exp(1 - 8/6) = exp(-1/3) = 71.65
    score = multi_bleu(["a b c d", "e f"], ["a b c d", "e f g h"]).score
    assert score == pytest.approx(100 * math.exp(-1 / 3), abs=1e-9)


def test_multi_bleu_edge_cases():
    assert multi_bleu(["Das ist ein Test ."], ["Das ist ein Test ."]).score == pytest.approx(100.0)
    # no matching 4-gram -> precision 0 -> BLEU 0 (no smoothing), although 1-3-grams match
    assert multi_bleu(["a b c x d"], ["a b c y d"]).score == 0.0
    # case-sensitive, clipped counts: "the the the" vs "The cat the": p1 = 1/3, no bigrams -> 0
    assert multi_bleu(["the the the"], ["The cat the"]).score == 0.0
    assert multi_bleu([""], ["a b c d"]).score == 0.0  # empty hypothesis (multi-bleu.perl would die)
    # empty references: multi-bleu.perl prints a fixed line of zeros
    assert str(multi_bleu(["a"], [""])) == "BLEU = 0, 0/0/0/0 (BP=0, ratio=0, hyp_len=0, ref_len=0)"
    # hypothesis longer than reference: no brevity penalty, only precisions (4/5, 3/4, 2/3, 1/2)
    longer = multi_bleu(["a b c d e"], ["a b c d"])
    assert longer.score == pytest.approx(100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)
    assert (longer.bp, longer.ratio) == (1.0, 1.25)


TOKENIZED_HYPS = [
    "Die Katze sitzt auf der Matte .",
    "Wir haben 3,5 Millionen Euro für das neue Haus ausgegeben .",
    "Er sagte , dass er morgen kommen würde .",
    "Das ist ein E ##AT##-##AT## Mail ##AT##-##AT## Konto .",
    "Gestern regnete es in Berlin den ganzen Tag",
]
TOKENIZED_REFS = [
    "Die Katze saß auf der Matte .",
    "Wir haben 3,5 Millionen Euro für das neue Haus ausgegeben , sagte er .",
    "Er sagte , er würde morgen kommen .",
    "Das ist ein E ##AT##-##AT## Mail ##AT##-##AT## Konto .",
    "Gestern hat es in Berlin den ganzen Tag geregnet .",
]


@pytest.mark.parametrize("hyps, refs", [
    (TOKENIZED_HYPS, TOKENIZED_REFS),              # c < r: brevity penalty applies
    (TOKENIZED_REFS, TOKENIZED_HYPS),              # c > r: no brevity penalty
    (TOKENIZED_HYPS[:2], TOKENIZED_REFS[:2]),
])
def test_multi_bleu_agrees_with_sacrebleu(hyps, refs):
    expected = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs]).score
    assert 0 < expected < 100
    assert multi_bleu(hyps, refs).score == pytest.approx(expected, abs=1e-6)


# --------------------------------------------------------------------------------------- tokenized BLEU

def test_tokenized_bleu_perfect_and_pretokenized_refs():
    refs = ["Die „E-Mail“ kam am 3. Mai, sagte er.", "Wie geht's?"]
    assert tokenized_bleu(list(refs), refs).score == pytest.approx(100.0)
    hyps = ["Die E-Mail kam am 3. Mai, sagte sie.", "Wie geht's?"]
    # refs already Moses-tokenized (like tensor2tensor's newstest2014.tok.de) give the same score
    pre = [moses_tokenize(replace_unicode_punctuation(r)) for r in refs]
    assert tokenized_bleu(hyps, pre, refs_tokenized=True) == tokenized_bleu(hyps, refs)
    # and it is exactly multi-bleu on the paper-tokenized text
    assert tokenized_bleu(hyps, refs) == multi_bleu([paper_tokenize(h) for h in hyps],
                                                    [paper_tokenize(r) for r in refs])


def test_tokenized_bleu_differs_from_sacrebleu():
    # The ##AT## split turns one mismatched compound into partly matching tokens, so the paper's BLEU
    # is higher here than sacreBLEU's (13a splits no hyphens): the same direction as on real data.
    hyps = ["Das neue E-Mail-Konto ist seit gestern aktiv und funktioniert gut."]
    refs = ["Das neue E-Mail-Postfach ist seit gestern aktiv und funktioniert gut."]
    paper = tokenized_bleu(hyps, refs).score
    sacre, _ = sacre_bleu(hyps, refs)
    assert paper > sacre > 0


def test_evaluate_scores_tokenized_bleu_with_the_target_languages_rules(monkeypatch):
    """A prepared EN-FR directory's runs pass lang="fr" (Dataset.tgt_lang): the French Moses rules keep the
    elided article "L'" whole, the German ones split the apostrophe off, and the two BLEU figures differ."""
    from types import SimpleNamespace

    from harness.data.batching import ParallelData
    from harness.eval import evaluate as ev
    hyps, refs = ["L'or monte vite.", "C'est l'heure."], ["L'or monte.", "C'est l'heure du thé."]
    monkeypatch.setattr(ev, "perplexity", lambda *a, **k: 2.0)
    monkeypatch.setattr(ev, "translate", lambda *a, **k: list(hyps))
    split = SimpleNamespace(data=ParallelData([[5, 6], [7]], [[8], [9, 10]]), src_text=["a", "b"], tgt_text=refs,
                            trees=None)
    kwargs = dict(prefix="dev", beam_size=4, alpha=0.6, max_extra=50, max_tokens=100, bleu_sentences=None,
                  autocast=None)
    fr, _ = ev.evaluate(None, None, split, "cpu", lang="fr", **kwargs)
    de, _ = ev.evaluate(None, None, split, "cpu", **kwargs)             # the default: German rules
    assert fr["dev_bleu_tok"] == pytest.approx(tokenized_bleu(hyps, refs, lang="fr").score)
    assert de["dev_bleu_tok"] == pytest.approx(tokenized_bleu(hyps, refs, lang="de").score)
    assert fr["dev_bleu_tok"] != pytest.approx(de["dev_bleu_tok"])


def test_evaluate_scores_tokenized_bleu_with_the_chosen_moses_version(monkeypatch):
    """train.bleu_moses reaches the tokenized BLEU: a line ending in a German abbreviation ("usw.") keeps
    its period under the 2017 rules and loses it under today's, so the two scores differ."""
    from types import SimpleNamespace

    from harness.data.batching import ParallelData
    from harness.eval import evaluate as ev
    hyps, refs = ["Er kauft Brot , Milch usw."], ["Er kauft Brot , Käse usw ."]
    monkeypatch.setattr(ev, "perplexity", lambda *a, **k: 2.0)
    monkeypatch.setattr(ev, "translate", lambda *a, **k: list(hyps))
    split = SimpleNamespace(data=ParallelData([[5, 6]], [[8]]), src_text=["a"], tgt_text=refs, trees=None)
    kwargs = dict(prefix="dev", beam_size=4, alpha=0.6, max_extra=50, max_tokens=100, bleu_sentences=None,
                  autocast=None)
    old, _ = ev.evaluate(None, None, split, "cpu", moses="2017", **kwargs)
    new, _ = ev.evaluate(None, None, split, "cpu", **kwargs)
    assert old["dev_bleu_tok"] == pytest.approx(tokenized_bleu(hyps, refs, moses="2017").score)
    assert new["dev_bleu_tok"] == pytest.approx(tokenized_bleu(hyps, refs).score)
    assert new["dev_bleu_tok"] > old["dev_bleu_tok"] > 0   # today's rules split "usw ." on both sides
