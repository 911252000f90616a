"""BLEU two ways: sacreBLEU (comparable, with a signature) and the paper's tokenized BLEU.

The paper's numbers come from tensor2tensor's get_ende_bleu.sh: Moses replace-unicode-punctuation.perl
and tokenizer.perl -l de, then the compound split s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g on both sides, then
multi-bleu.perl. That is re-implemented here in Python (no perl, no network). On real newstest2014 output
tokenized BLEU runs 0.7-1.5 above sacreBLEU (tensor2tensor#317), so only compare like with like.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import regex  # Perl-style Unicode properties (\p{IsAlnum} ...); a dependency of sacrebleu
from sacrebleu.metrics import BLEU

from harness.errors import UserError


def _check(hyps: list[str], refs: list[str], what: str = "hypotheses") -> None:
    if not refs:
        raise UserError("references: empty list; BLEU needs at least one reference sentence.")
    if len(hyps) != len(refs):
        raise UserError(f"{what} ({len(hyps)} lines) and references ({len(refs)} lines) must have the same number of lines.")


# ---------------------------------------------------------------------------------------------- sacreBLEU

def sacre_bleu(hyps: list[str], refs: list[str]) -> tuple[float, str]:
    """Corpus sacreBLEU on detokenized text (13a tokenizer, exp smoothing: sacrebleu's defaults) and its
    signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"."""
    _check(hyps, refs)
    # force: the made-up corpus writes its final period as a separate token, which sacreBLEU would warn
    # about on every call ("forgot to detokenize"); the score is the same either way.
    bleu = BLEU(force=True)
    score = bleu.corpus_score(hyps, [refs]).score
    return score, str(bleu.get_signature())  # the signature is only complete after scoring


def copy_baseline_bleu(srcs: list[str], refs: list[str]) -> tuple[float, str]:
    """sacreBLEU of the untranslated source used as the hypothesis: a floor any real system must beat
    (EN-DE shares names and numbers, so it is not 0)."""
    _check(srcs, refs, "sources")
    return sacre_bleu(srcs, refs)


# ------------------------------------------------------------------------------ Moses tokenizer (-l de)

# Moses replace-unicode-punctuation.perl, in its order. "１" -> '"' is a bug in the original, kept so the
# output matches the paper's script. Note „ is NOT mapped: the paper's newstest2014 reference had to be
# hand-edited for that (tensor2tensor#317); we tokenize both sides identically instead.
_UNICODE_PUNCT = [
    ("，", ","), ("。 *", ". "), ("、", ","), ("”", '"'), ("“", '"'), ("∶", ":"), ("：", ":"), ("？", "?"),
    ("《", '"'), ("》", '"'), ("）", ")"), ("！", "!"), ("（", "("), ("；", ";"), ("１", '"'), ("」", '"'),
    ("「", '"'), ("０", "0"), ("３", "3"), ("２", "2"), ("５", "5"), ("６", "6"), ("９", "9"), ("７", "7"),
    ("８", "8"), ("４", "4"), ("． *", ". "), ("～", "~"), ("’", "'"), ("…", "..."), ("━", "-"), ("〈", "<"),
    ("〉", ">"), ("【", "["), ("】", "]"), ("％", "%"),
]
_UNICODE_PUNCT_RE = [(re.compile(pat), rep) for pat, rep in _UNICODE_PUNCT]


def replace_unicode_punctuation(line: str) -> str:
    for pat, rep in _UNICODE_PUNCT_RE:
        line = pat.sub(rep, line)
    return line


# Moses share/nonbreaking_prefixes/nonbreaking_prefix.de: a word ending in "." whose stem is listed here
# keeps its period ("z.B.", "Dr.", ordinals "3."). The German file has no #NUMERIC_ONLY# entries.
_NONBREAKING_DE = frozenset("""
A B C D E F G H I J K L M N O P Q R S T U V W X Y Z a b c d e f g h i j k l m n o p q r s t u v w x y z
I II III IV V VI VII VIII IX X XI XII XIII XIV XV XVI XVII XVIII XIX XX
i ii iii iv v vi vii viii ix x xi xii xiii xiv xv xvi xvii xviii xix xx
Adj Adm Adv Asst Bart Bldg Brig Bros Capt Cmdr Col Comdr Con Corp Cpl DR Dr Ens Gen Gov Hon Hosp Insp Lt
MM MR MRS MS Maj Messrs Mlle Mme Mr Mrs Ms Msgr Op Ord Pfc Ph Prof Pvt Rep Reps Res Rev Rt Sen Sens Sfc
Sgt Sr St Supt Surg
Mio Mrd bzw v vs usw d.h z.B u.a etc MwSt ggf d.J D.h m.E vgl I.F z.T sogen ff u.E g.U g.g.A c.-à-d
Buchst u.s.w sog u.ä Std evtl Zt Chr u.U o.ä Ltd b.A z.Zt spp sen SA k.o jun i.H.v dgl dergl Co zzt usf
s.p.a Dkr bzgl BSE
No Nos Art Nr pp ca Ca
""".split()) | {str(n) for n in range(1, 100)}

# Perl's \s, \p{IsAlnum}, \p{IsN}, \p{IsAlpha}, \p{IsLower} have the same meaning in the `regex` module.
_WS = regex.compile(r"\s+")
_CONTROL = regex.compile(r"[\x00-\x1f]")
_SPECIAL = regex.compile(r"([^\p{IsAlnum}\s\.'`,\-])")
_MULTIDOT = regex.compile(r"\.([\.]+)")
_DOTMULTI_NEXT = regex.compile(r"DOTMULTI\.([^\.])")
_COMMA_AFTER_NONNUM = regex.compile(r"([^\p{N}])[,]")
_COMMA_BEFORE_NONNUM = regex.compile(r"[,]([^\p{N}])")
_COMMA_FINAL_NUM = regex.compile(r"([\p{N}])[,]$")
_WORD_DOT = regex.compile(r"(\S+)\.")
_ALPHA = regex.compile(r"\p{IsAlpha}")
_LOWER_START = regex.compile(r"[\p{IsLower}]")
_ESCAPES = [("&", "&amp;"), ("|", "&#124;"), ("<", "&lt;"), (">", "&gt;"), ("'", "&apos;"), ('"', "&quot;"),
            ("[", "&#91;"), ("]", "&#93;")]


def moses_tokenize(line: str, escape: bool = True) -> str:
    """Moses tokenizer.perl -l de (default options: no -a hyphen splitting, escaping on), step by step.

    German branch specifics: every ASCII apostrophe becomes its own token ("geht's" -> "geht ' s", no
    English-style clitics); commas inside numbers stay ("1,000"), dots inside words stay ("1.000", "z.B.");
    a final period is split off unless the word is a nonbreaking prefix or the next word is lowercase.
    `escape` mirrors tokenizer.perl's default XML escaping (& | < > ' " [ ] -> entities). It is a
    one-to-one token renaming, so it never changes BLEU when both sides are tokenized here; keeping it
    makes our output identical to Moses' (e.g. comparable with tensor2tensor's newstest2014.tok.de).
    Lines that are empty or whitespace-only come back as "".
    """
    text = _CONTROL.sub("", _WS.sub(" ", line)).strip(" ")
    text = _SPECIAL.sub(r" \1 ", text)  # isolate everything but letters, digits, . ' ` , -

    # Keep runs of dots ("...") together by hiding them from the end-of-sentence rule.
    text = _MULTIDOT.sub(r" DOTMULTI\1", text)
    while "DOTMULTI." in text:
        text = _DOTMULTI_NEXT.sub(r"DOTDOTMULTI \1", text)
        text = text.replace("DOTMULTI.", "DOTDOTMULTI")

    # Split commas unless between digits ("5,300"); two passes so "A,B,C" splits every comma.
    text = _COMMA_AFTER_NONNUM.sub(r"\1 , ", text)
    text = _COMMA_BEFORE_NONNUM.sub(r" , \1", text)
    text = _COMMA_FINAL_NUM.sub(r"\1 ,", text)
    text = text.replace("'", " ' ")  # -l de: split all apostrophes

    words = text.split(" ")
    while words and words[-1] == "":  # Perl's split drops trailing empty fields, keeps leading ones
        words.pop()
    last = len(words) - 1
    for i, word in enumerate(words):
        m = _WORD_DOT.fullmatch(word)
        if not m:
            continue
        pre = m.group(1)
        if i == last:  # final word: a sentence end, not an abbreviation
            words[i] = pre + " ."
        elif (("." in pre and _ALPHA.search(pre)) or pre in _NONBREAKING_DE
              or _LOWER_START.match(words[i + 1])):
            pass
        else:
            words[i] = pre + " ."
    text = " ".join(w for w in " ".join(words).split(" ") if w)
    # (Moses' "s/\.\' ?$/ . ' /" fix-up cannot fire for -l de: every ' already has a space before it.)

    while "DOTDOTMULTI" in text:
        text = text.replace("DOTDOTMULTI", "DOTMULTI.")
    text = text.replace("DOTMULTI", ".")
    if escape:
        for char, entity in _ESCAPES:
            text = text.replace(char, entity)
    return text


# re.ASCII: multi-bleu/perl -p see bytes, where only ASCII whitespace is \s.
_COMPOUND = re.compile(r"(\S)-(\S)", re.ASCII)


def split_compounds(line: str) -> str:
    """The paper script's s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g. Matches do not overlap, exactly as in
    Perl: "a-b-c" -> "a ##AT##-##AT## b-c" (the second hyphen's left neighbour was consumed)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def paper_tokenize(line: str) -> str:
    """Full pipeline applied to each side: unicode punctuation -> Moses -l de -> compound split."""
    return split_compounds(moses_tokenize(replace_unicode_punctuation(line)))


# --------------------------------------------------------------------------------------------- multi-bleu

_ASCII_WS = re.compile(r"[ \t\n\r\f\v]+")


def _split(line: str) -> list[str]:
    """Perl's `split` on a byte string: ASCII whitespace only (a no-break space stays inside a token)."""
    return [t for t in _ASCII_WS.split(line) if t]


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def multi_bleu(hyps_tok: list[str], refs_tok: list[str]) -> float:
    """multi-bleu.perl on already-tokenized text, one reference, case-sensitive, unrounded (0-100).

    Corpus level: clipped n-gram matches and totals (n = 1..4) summed over all sentences, geometric mean
    of the four precisions, brevity penalty exp(1 - r/c) when the hypothesis length c < reference length
    r. No smoothing: any zero precision gives 0. multi-bleu prints this rounded to 2 decimals.
    """
    _check(hyps_tok, refs_tok)
    correct, total = [0] * 5, [0] * 5
    hyp_len = ref_len = 0
    for hyp, ref in zip(hyps_tok, refs_tok):
        h, r = _split(hyp), _split(ref)
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_ngrams, r_ngrams = _ngrams(h, n), _ngrams(r, n)
            total[n] += sum(h_ngrams.values())
            correct[n] += sum(min(c, r_ngrams[g]) for g, c in h_ngrams.items())
    if ref_len == 0 or hyp_len == 0 or any(correct[n] == 0 for n in range(1, 5)):
        return 0.0  # multi-bleu: zero precision -> log -9999999999 -> 0; empty hypotheses: perl dies
    log_p = sum(math.log(correct[n] / total[n]) for n in range(1, 5)) / 4
    bp = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    return 100 * bp * math.exp(log_p)


def tokenized_bleu(hyps: list[str], refs: list[str], refs_tokenized: bool = False) -> float:
    """The paper's BLEU: `paper_tokenize` both sides (refs_tokenized=True: refs are already Moses-tokenized,
    e.g. tensor2tensor's newstest2014.tok.de, and only get the compound split), then `multi_bleu`.

    Expect it 0.7-1.5 above `sacre_bleu` on real newstest2014 output (the 13a tokenizer is not Moses',
    and ##AT## splitting adds easy matches); report sacreBLEU with its signature alongside.
    """
    _check(hyps, refs)
    ref_fn = split_compounds if refs_tokenized else paper_tokenize
    return multi_bleu([paper_tokenize(h) for h in hyps], [ref_fn(r) for r in refs])
