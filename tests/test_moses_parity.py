"""Our Moses port against the real scripts' outputs in tests/fixtures/moses (see its README for the Moses
commits and the commands): every line of every stage equal, multi-bleu's printed line equal, for today's
scripts (2025, the default) and for those of the paper's time (2017, in tests/fixtures/moses/2017)."""

from pathlib import Path

import pytest

from harness.errors import UserError
from harness.eval.bleu import (
    moses_tokenize,
    multi_bleu,
    paper_tokenize,
    replace_unicode_punctuation,
    split_compounds,
    tokenized_bleu,
)

FIXTURES = Path(__file__).parent / "fixtures" / "moses"
LANGS = ("de", "fr", "en")
VERSIONS = ("2025", "2017")
CASES = [(lang, version) for version in VERSIONS for lang in LANGS]


def outputs(version: str) -> Path:
    """Where the scripts' outputs of a Moses version are; the inputs (LANG.txt, bleu/LANG.hyp) are shared."""
    return FIXTURES / "2017" if version == "2017" else FIXTURES


def read_lines(path: Path) -> list[str]:
    """Lines split on \\n only: fixture lines hold \\r, \\x0b, \\x85 and \\u2028, where splitlines() cuts."""
    text = path.read_bytes().decode("utf-8")
    assert text.endswith("\n"), path
    return text[:-1].split("\n")


def stages(lang: str, version: str = "2025") -> dict[str, list[str]]:
    files = {"txt": read_lines(FIXTURES / f"{lang}.txt")}
    files.update({ext: read_lines(outputs(version) / f"{lang}.{ext}") for ext in ("punct", "tok", "atat")})
    assert len({len(v) for v in files.values()}) == 1, f"{lang}: fixture files differ in length"
    return files


def mismatches(fn, inputs: list[str], expected: list[str]) -> list[tuple[int, str, str, str]]:
    """(line number, input, Moses, ours) for every line where `fn` differs from the real script."""
    out = []
    for i, (x, want) in enumerate(zip(inputs, expected), 1):
        got = fn(x)
        if got != want:
            out.append((i, x, want, got))
    return out


@pytest.mark.parametrize("lang, version", CASES)
def test_replace_unicode_punctuation_matches_moses(lang, version):
    s = stages(lang, version)
    assert mismatches(lambda line: replace_unicode_punctuation(line, version), s["txt"], s["punct"]) == []


@pytest.mark.parametrize("lang, version", CASES)
def test_tokenizer_matches_moses(lang, version):
    s = stages(lang, version)
    assert len(s["tok"]) > 150
    assert mismatches(lambda line: moses_tokenize(line, lang, moses=version), s["punct"], s["tok"]) == []


@pytest.mark.parametrize("lang, version", CASES)
def test_compound_split_matches_perl(lang, version):
    s = stages(lang, version)
    assert mismatches(split_compounds, s["tok"], s["atat"]) == []


@pytest.mark.parametrize("lang, version", CASES)
def test_paper_pipeline_matches_moses(lang, version):
    s = stages(lang, version)
    assert mismatches(lambda line: paper_tokenize(line, lang, version), s["txt"], s["atat"]) == []


@pytest.mark.parametrize("lang, differ", [("de", 29), ("fr", 11), ("en", 18)])
def test_the_two_versions_part_where_the_readme_says(lang, differ):
    """The fixtures hold lines on which the 2017 and 2025 scripts disagree (so each version's parity test
    above can fail for the other version's rules), as many as tests/fixtures/moses/README.md counts."""
    new, old = stages(lang, "2025")["atat"], stages(lang, "2017")["atat"]
    assert sum(a != b for a, b in zip(new, old)) == differ


def test_the_2017_rules_the_paper_ran():
    assert moses_tokenize("Das ist usw.", "de", moses="2017") == "Das ist usw."      # before 9fc964da (2018)
    assert moses_tokenize("So am I.", "en", moses="2017") == "So am I."
    assert moses_tokenize("Es kostet Rs. 5 hier.", "en", moses="2017") == "Es kostet Rs . 5 hier ."  # 2019
    assert moses_tokenize("Es kostet Rs. 5 hier.", "en") == "Es kostet Rs. 5 hier ."
    assert replace_unicode_punctuation("Test１", "2017") == 'Test"'                    # before 5d3331b9 (2019)
    assert paper_tokenize("Das ist usw.", "de", 2017) == "Das ist usw."               # YAML's 2017 is a number


def test_fixtures_cover_the_reported_differences():
    # The cases a user found where the port differed from Moses; each fixture line is pinned above, this
    # names them so that a fixture rewrite cannot silently drop one.
    de = dict(zip(stages("de")["txt"], stages("de")["atat"]))
    assert de["Test１Wort １ Ende１"] == "Test1Wort 1 Ende1"                     # fullwidth digit (2019 rule)
    assert de["Abb. \x01 zeigt es."] == "Abb. zeigt es ."                        # control char between spaces
    assert de["\u3000"] == "\u3000" and de["   "] == "   "                      # whitespace-only lines kept
    assert de["ä-ö-ü"] == "ä ##AT##-##AT## ö ##AT##-##AT## ü"                    # byte-level compound split
    assert de["Das ist usw."] == "Das ist usw ."                                 # 2018 final-period rule
    fr = dict(zip(stages("fr")["txt"], stages("fr")["tok"]))
    assert fr["L'homme est là."] == "L&apos; homme est là ."
    assert fr["Aujourd'hui, il pleut."] == "Aujourd&apos; hui , il pleut ."
    en = dict(zip(stages("en")["txt"], stages("en")["tok"]))
    assert en["I don't know."] == "I don &apos;t know ."
    assert en["It's fine."] == "It &apos;s fine ."
    assert en["No. 5 is free."] == "No. 5 is free ." and en["No. He left."] == "No . He left ."
    assert en["He said 'hi.'"] == "He said &apos; hi . &apos; "                  # Moses' trailing space


# ------------------------------------------------------------------------------------------- multi-bleu

def multi_bleu_line(name: str, version: str = "2025") -> str:
    (line,) = read_lines(outputs(version) / "bleu" / name)
    return line


@pytest.mark.parametrize("lang, version", CASES)
def test_tokenized_bleu_matches_multi_bleu_perl(lang, version):
    hyps, refs = read_lines(FIXTURES / "bleu" / f"{lang}.hyp"), read_lines(FIXTURES / "bleu" / f"{lang}.ref")
    for result, name in ((tokenized_bleu(hyps, refs, lang=lang, moses=version), f"{lang}.multi-bleu.txt"),
                         (tokenized_bleu(refs, hyps, lang=lang, moses=version), f"{lang}.reversed.multi-bleu.txt")):
        line = multi_bleu_line(name, version)
        assert str(result) == line                                      # every printed part, same rounding
        perl_score = float(line.split(",")[0].removeprefix("BLEU = "))
        assert result.score == pytest.approx(perl_score, abs=0.01)
        assert 0 < result.score < 100 and float(result) == result.score


@pytest.mark.parametrize("lang, version", CASES)
def test_tokenized_sides_match_moses(lang, version):
    for side in ("hyp", "ref"):
        raw = read_lines(FIXTURES / "bleu" / f"{lang}.{side}")
        assert mismatches(lambda line: paper_tokenize(line, lang, version), raw,
                          read_lines(outputs(version) / "bleu" / f"{lang}.{side}.atat")) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_bleu_on_perl_tokenized_files(version):
    for lang in LANGS:
        hyps = read_lines(outputs(version) / "bleu" / f"{lang}.hyp.atat")
        refs = read_lines(outputs(version) / "bleu" / f"{lang}.ref.atat")
        assert str(multi_bleu(hyps, refs)) == multi_bleu_line(f"{lang}.multi-bleu.txt", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_zero_bleu_still_prints_its_parts(version):
    hyps, refs = read_lines(FIXTURES / "bleu" / "zero.hyp"), read_lines(FIXTURES / "bleu" / "zero.ref")
    result = tokenized_bleu(hyps, refs, moses=version)
    assert str(result) == multi_bleu_line("zero.multi-bleu.txt", version)
    assert result.score == 0.0 and result.precisions[0] > 0


def test_target_language_changes_the_score():
    # The French pair tokenized with German rules gives a different (wrong) score: "l'homme" is split
    # three ways instead of two, and French abbreviations are not German ones.
    hyps, refs = read_lines(FIXTURES / "bleu" / "fr.hyp"), read_lines(FIXTURES / "bleu" / "fr.ref")
    as_german, as_french = tokenized_bleu(hyps, refs, lang="de"), tokenized_bleu(hyps, refs, lang="fr")
    assert as_german.score != pytest.approx(as_french.score)
    assert str(as_french) == multi_bleu_line("fr.multi-bleu.txt")


def test_unknown_moses_version_is_rejected():
    with pytest.raises(UserError, match=r"moses: '2018' is not a version .* choose one of 2025, 2017"):
        tokenized_bleu(["a"], ["a"], moses="2018")


def test_unknown_language_is_rejected():
    with pytest.raises(UserError, match=r"lang: 'fra' .* choose one of de, fr, en \(did you mean fr\?\)"):
        moses_tokenize("x", "fra")
    with pytest.raises(UserError, match="lang: 'it'"):
        tokenized_bleu(["a"], ["a"], lang="it")
