"""Readers, atomic writer and WMT14 preparation, on tiny made-up fixtures (no network, no real data)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from harness.data.readers import read_lines, read_parallel, read_sgml, write_lines
from harness.data.wmt import WMT14_EN_DE_FILES, WMT14_EN_FR_FILES, prepare_wmt14_en_de, prepare_wmt14_en_fr
from harness.errors import UserError
from tests.helpers import fake_wmt, fake_wmt_fr, sgm, write

# ------------------------------------------------------------------------------------------- read_lines

def test_read_lines_strips_only_line_endings(tmp_path):
    # CRLF ending, inner/outer spaces kept, U+2028 inside a line is NOT a line break, BOM dropped,
    # last line without "\n" still counts.
    p = write(tmp_path / "a.txt", "\ufeffeins  zwei \r\n drei\u2028vier\n\nletzte")
    assert read_lines(p) == ["eins  zwei ", " drei\u2028vier", "", "letzte"]


def test_read_lines_missing_path(tmp_path):
    p = tmp_path / "nope.txt"
    with pytest.raises(UserError, match="nope.txt: file not found"):
        read_lines(p)


def test_read_lines_directory(tmp_path):
    with pytest.raises(UserError, match="not a regular file") as e:
        read_lines(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_read_lines_empty_file(tmp_path):
    p = write(tmp_path / "empty.de", b"")
    with pytest.raises(UserError, match="empty.de: file is empty"):
        read_lines(p)


def test_read_lines_non_utf8_names_line(tmp_path):
    p = write(tmp_path / "latin1.de", "gut\nauch gut\n".encode() + "Größe\n".encode("latin-1"))
    with pytest.raises(UserError) as e:
        read_lines(p)
    msg = str(e.value)
    assert str(p) in msg and "line 3" in msg and "0xf6" in msg and "UTF-8" in msg


def test_read_parallel_ok_and_unequal_counts(tmp_path):
    en = write(tmp_path / "x.en", "a\nb\nc\n")
    de = write(tmp_path / "x.de", "A\nB\nC\n")
    assert read_parallel(en, de) == (["a", "b", "c"], ["A", "B", "C"])
    short = write(tmp_path / "short.de", "A\nB\n")
    with pytest.raises(UserError) as e:
        read_parallel(en, short)
    assert f"{en} has 3 lines but {short} has 2" in str(e.value)


def test_read_parallel_rejects_empty(tmp_path):
    en = write(tmp_path / "x.en", "a\n")
    de = write(tmp_path / "x.de", b"")
    with pytest.raises(UserError, match="x.de: file is empty"):
        read_parallel(en, de)


# ------------------------------------------------------------------------------------------ write_lines

def test_write_lines_roundtrip_no_temp_left(tmp_path):
    p = tmp_path / "out.txt"
    write_lines(p, ["ä b", "", "c\u2028d"])
    assert p.read_bytes() == "ä b\n\nc\u2028d\n".encode()
    assert read_lines(p) == ["ä b", "", "c\u2028d"]
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_lines_failure_keeps_old_file_and_no_temp(tmp_path):
    p = write(tmp_path / "out.txt", "old\n")

    def lines():
        yield "new 1"
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        write_lines(p, lines())
    with pytest.raises(UserError, match="item 2 contains a newline"):
        write_lines(p, ["ok", "bad\nline"])
    assert p.read_text() == "old\n"  # never half-written
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_lines_missing_dir(tmp_path):
    with pytest.raises(UserError, match="parent directory .* does not exist"):
        write_lines(tmp_path / "no" / "out.txt", ["x"])


# --------------------------------------------------------------------------------------------- read_sgml

SGML_REF = """<refset setid="newstest2014" srclang="any" trglang="de">
<doc sysid="ref" docid="1-fake" genre="news" origlang="en">
<p>
<seg id="1">Fischer &amp; Söhne sagen &quot;Hallo&quot;.</seg>
<seg  id = "2"   >  Mehr   Platz &lt;hier&gt; &apos;n Ding  </seg>
</p>
</doc>
<doc sysid="ref" docid="2-fake" genre="news" origlang="de">
<seg id="1">zwei
Zeilen &#228; &#xE4; &amp;lt; AT&T</seg><SEG ID="2"></SEG>
</doc>
</refset>
"""


def test_read_sgml_order_entities_whitespace(tmp_path):
    p = write(tmp_path / "newstest2014-deen-ref.de.sgm", SGML_REF)
    assert read_sgml(p) == [
        'Fischer & Söhne sagen "Hallo".',
        "Mehr Platz <hier> 'n Ding",
        "zwei Zeilen ä ä &lt; AT&T",  # &amp;lt; unescapes once; a bare & is tolerated
        "",  # empty segment kept so that source and reference stay aligned
    ]


@pytest.mark.parametrize("body, line, what", [
    ('<doc>\n<seg id="1">a\n<seg id="2">b</seg>\n</doc>', 3, "opened before"),
    ('<doc>\n<seg id="1">a</seg>\nb</seg>\n</doc>', 3, "without a matching"),
    ('<doc>\n\n<seg id="1">a\n</doc>', 4, "</doc> inside an unclosed <seg>"),
    ('<doc>\n<seg id="1">a', 2, "never closed"),
    ('<doc>\n<seg id="1" a</seg>', 2, "without its closing '>'"),
])
def test_read_sgml_malformed(tmp_path, body, line, what):
    p = write(tmp_path / "bad.sgm", body)
    with pytest.raises(UserError) as e:
        read_sgml(p)
    assert str(p) in str(e.value) and f"line {line}" in str(e.value) and what in str(e.value)


def test_read_sgml_no_segments_and_missing(tmp_path):
    p = write(tmp_path / "plain.sgm", "just text\n")
    with pytest.raises(UserError, match="plain.sgm: no <seg> elements"):
        read_sgml(p)
    with pytest.raises(UserError, match="missing.sgm: file not found"):
        read_sgml(tmp_path / "missing.sgm")


# -------------------------------------------------------------------------------------- prepare (WMT14)

def test_prepare_end_to_end(tmp_path):
    out = tmp_path / "out"
    manifest = prepare_wmt14_en_de(fake_wmt(tmp_path / "wmt"), out)
    # The empty English line in Europarl drops its pair; order is europarl, commoncrawl, news-commentary.
    assert read_lines(out / "train.en") == ["Resumption of the session", "Thank you.", "A small house",
                                            "One two three four five six", "Gold is up."]
    assert read_lines(out / "train.de") == ["Wiederaufnahme der Sitzung", "Danke.", "Ein kleines Haus",
                                            "Eins", "Gold steigt."]
    assert read_lines(out / "dev.de") == ["Dev eins.", "Dev zwei."]
    assert read_lines(out / "test.en") == ["Tom & Jerry", "x < y"]
    assert read_lines(out / "test.de") == ["Tom & Jerry", "x < y"]

    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    for name in ["train.en", "train.de", "dev.en", "dev.de", "test.en", "test.de"]:
        data = (out / name).read_bytes()
        assert manifest["outputs"][name] == {"lines": data.count(b"\n"),
                                             "sha256": hashlib.sha256(data).hexdigest()}
    corpora = [(s["corpus"], s["lines"], s["kept"]) for s in manifest["sources"]["train"]]
    assert corpora == [("europarl-v7", 3, 2), ("commoncrawl", 2, 2), ("news-commentary-v9", 1, 1)]
    assert manifest["sources"]["train"][0]["en"] == "training/europarl-v7.de-en.en"
    assert manifest["sources"]["test"]["en"] == "test-full/newstest2014-deen-src.en.sgm"
    assert manifest["dropped"] == {"empty": 1, "ratio": 0}
    # The fixture's test set is not the 3003-line newstest2014: recorded, not fatal.
    assert any("3003" in w for w in manifest["warnings"])
    assert sorted(os.listdir(out)) == sorted(["train.en", "train.de", "dev.en", "dev.de", "test.en",
                                               "test.de", "manifest.json"])  # no temp files


def test_prepare_dev_from_sgml_and_ratio_filter(tmp_path):
    out = tmp_path / "out"
    manifest = prepare_wmt14_en_de(fake_wmt(tmp_path / "wmt", dev_plain=False), out, max_len_ratio=3)
    assert read_lines(out / "dev.en") == ["Dev & one."]
    assert manifest["sources"]["dev"]["format"] == "sgml"
    # "One two three four five six" / "Eins" is 6:1 > 3, so it goes.
    assert "Eins" not in read_lines(out / "train.de")
    assert manifest["dropped"] == {"empty": 1, "ratio": 1}
    with pytest.raises(UserError, match="max_len_ratio=0.5"):
        prepare_wmt14_en_de(tmp_path / "wmt", out, max_len_ratio=0.5)


def test_prepare_missing_files_message(tmp_path):
    root = fake_wmt(tmp_path / "wmt")
    (root / "commoncrawl.de-en.de").unlink()
    for f in (root / "test-full").iterdir():
        f.unlink()
    write(root / "training-parallel-commoncrawl.tgz", b"not extracted")
    with pytest.raises(UserError) as e:
        prepare_wmt14_en_de(root, tmp_path / "out")
    msg = str(e.value)
    assert msg.startswith(f"{root}: required WMT14 files not found")
    assert "commoncrawl.de-en.de (from training-parallel-commoncrawl.tgz, present but not extracted)" in msg
    assert "newstest2014-deen-src.en.sgm and newstest2014-deen-ref.de.sgm (from test-full.tgz)" in msg
    for present in ("commoncrawl.de-en.en", "europarl", "news-commentary", "newstest2013"):
        assert present not in msg.replace("commoncrawl.de-en.de", "")
    assert not (tmp_path / "out").exists()  # nothing written before the inputs are known to be complete


def test_prepare_unequal_training_counts(tmp_path):
    root = fake_wmt(tmp_path / "wmt")
    de = write(root / "commoncrawl.de-en.de", "Ein kleines Haus\n")
    out = tmp_path / "out"
    with pytest.raises(UserError) as e:
        prepare_wmt14_en_de(root, out)
    assert f"{root / 'commoncrawl.de-en.en'} has 2 lines but {de} has 1" in str(e.value)
    assert os.listdir(out) == []  # neither train file nor a temp file was left


def test_prepare_unequal_sgml_counts_and_bad_dirs(tmp_path):
    root = fake_wmt(tmp_path / "wmt")
    ref = write(root / "test-full/newstest2014-deen-ref.de.sgm", sgm("refset", ["nur eins"]))
    with pytest.raises(UserError, match=f"has 2 segments but {ref} has 1"):
        prepare_wmt14_en_de(root, tmp_path / "out")
    with pytest.raises(UserError, match="not a directory"):
        prepare_wmt14_en_de(tmp_path / "nowhere", tmp_path / "out")


def test_prepare_duplicate_file(tmp_path):
    root = fake_wmt(tmp_path / "wmt")
    write(root / "copy/commoncrawl.de-en.en", "A small house\n")
    with pytest.raises(UserError, match="found 2 copies of commoncrawl.de-en.en"):
        prepare_wmt14_en_de(root, tmp_path / "out")


def test_files_doc_names_every_archive():
    for archive in ("training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz",
                    "training-parallel-nc-v9.tgz", "dev.tgz", "test-full.tgz"):
        assert archive in WMT14_EN_DE_FILES


# -------------------------------------------------------------------------------- prepare (WMT14 EN-FR)

EN_FR_OUTPUTS = ["train.en", "train.fr", "dev.en", "dev.fr", "test.en", "test.fr"]


def test_prepare_en_fr_end_to_end(tmp_path):
    from harness.data.corpus import DataConfig, load_dataset
    out = tmp_path / "out"
    manifest = prepare_wmt14_en_fr(fake_wmt_fr(tmp_path / "wmt"), out)
    # fairseq's order: europarl, commoncrawl, UN, news-commentary, giga-fren; the empty English Europarl line
    # and the whitespace-only giga-fren line drop their pairs.
    assert read_lines(out / "train.en") == ["Resumption of the session", "Thank you.", "A small house",
                                            "One two three four five six", "The General Assembly,",
                                            "Gold is up.", "Changing lives"]
    assert read_lines(out / "train.fr") == ["Reprise de la session", "Merci.", "Une petite maison", "Un",
                                            "L'Assemblée générale,", "L'or monte.", "Changer des vies"]
    assert read_lines(out / "dev.fr") == ["Dév un.", "Dév deux."]
    assert read_lines(out / "test.en") == ["Tom & Jerry", "x < y", "Yes"]
    assert read_lines(out / "test.fr") == ["Tom & Jerry", "x < y", "Oui"]
    assert manifest["pair"] == "en-fr"
    assert manifest["paper"] == {"vocab_size": 32000, "train_pairs": 36_000_000}   # §5.1
    corpora = [(s["corpus"], s["lines"], s["kept"]) for s in manifest["sources"]["train"]]
    assert corpora == [("europarl-v7", 3, 2), ("commoncrawl", 2, 2), ("un", 1, 1), ("news-commentary-v9", 1, 1),
                       ("giga-fren", 2, 1)]
    assert manifest["sources"]["train"][2] == {"corpus": "un", "archive": "training-parallel-un.tgz",
                                               "en": "un/undoc.2000.fr-en.en", "fr": "un/undoc.2000.fr-en.fr",
                                               "lines": 1, "kept": 1}
    assert manifest["sources"]["dev"]["corpus"] == "newstest2013"
    assert manifest["sources"]["test"]["fr"] == "test-full/newstest2014-fren-ref.fr.sgm"
    assert manifest["dropped"] == {"empty": 2, "ratio": 0}
    assert json.loads((out / "manifest.json").read_text()) == manifest
    for name in EN_FR_OUTPUTS:
        data = (out / name).read_bytes()
        assert manifest["outputs"][name] == {"lines": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest()}
    assert sorted(os.listdir(out)) == sorted(EN_FR_OUTPUTS + ["manifest.json"])   # no temp files
    # A run reads the directory as it does EN-DE's (train.en / train.fr) and trains its shared BPE model on
    # it: the paper's 32000 pieces on the real corpus; on this fixture's few words, a vocabulary of at most 64
    # (sentencepiece takes fewer where the text holds fewer).
    data = load_dataset(DataConfig(name=str(out), cache_dir=str(tmp_path / "cache")), vocab_size=64)
    assert data.train.tgt_text[-1] == "Changer des vies" and len(data.test.src_text) == 3
    assert data.tgt_lang == "fr"   # the paper's tokenized BLEU then uses Moses' French rules
    assert 41 < data.tokenizer.vocab_size <= 64   # more than the 41 characters and specials


def test_prepare_en_fr_dev_from_sgml(tmp_path):
    manifest = prepare_wmt14_en_fr(fake_wmt_fr(tmp_path / "wmt", dev_plain=False), tmp_path / "out")
    assert read_lines(tmp_path / "out/dev.fr") == ["Dév & un."]
    assert manifest["sources"]["dev"]["format"] == "sgml"


def _break(root: Path, case: str) -> str:
    """Damage the EN-FR fixture one way; return what the error must name."""
    if case == "missing":
        (root / "un/undoc.2000.fr-en.fr").unlink()
        return "undoc.2000.fr-en.fr (from training-parallel-un.tgz)"
    if case == "gzipped":   # giga-fren left gzipped as its .tar holds it is read (test_real_data.py); a damaged one:
        for lang in ("en", "fr"):
            p = root / f"giga-fren.release2.fixed.{lang}"
            p.rename(p.with_name(p.name + ".gz"))      # not gzip inside
        return "giga-fren.release2.fixed.en.gz: not a readable gzip file"
    if case == "counts":
        write(root / "commoncrawl.fr-en.fr", "Une petite maison\n")
        return f"{root / 'commoncrawl.fr-en.en'} has 2 lines but {root / 'commoncrawl.fr-en.fr'} has 1"
    if case == "encoding":
        write(root / "training/news-commentary-v9.fr-en.fr", "L'or monte \xe0 Paris.\n".encode("latin-1"))
        return "news-commentary-v9.fr-en.fr: line 1 is not valid UTF-8"
    if case == "empty":
        write(root / "giga-fren.release2.fixed.fr", b"")
        return "giga-fren.release2.fixed.fr: file is empty"
    if case == "sgml":
        write(root / "test-full/newstest2014-fren-ref.fr.sgm", '<refset>\n<seg id="1">Tom\n</refset>\n')
        return "newstest2014-fren-ref.fr.sgm: malformed SGML at line 3"
    if case == "segments":
        write(root / "test-full/newstest2014-fren-ref.fr.sgm", sgm("refset", ["un", "deux"]))
        return "has 3 segments but"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing", "gzipped", "counts", "encoding", "empty", "sgml", "segments"])
def test_prepare_en_fr_bad_input_is_one_sentence_exit_2_nothing_written(capsys, tmp_path, case):
    from harness.cli import main
    root = fake_wmt_fr(tmp_path / "wmt")
    needle = _break(root, case)
    out = tmp_path / "out"
    code = main(["data", "prepare", "wmt14-en-fr", "--from", str(root), "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    assert needle in lines[0]
    assert not out.exists() or os.listdir(out) == []   # no output file, no temp file, no manifest


def test_prepare_en_fr_bad_input_keeps_a_previous_complete_output(tmp_path):
    root, out = fake_wmt_fr(tmp_path / "wmt"), tmp_path / "out"
    prepare_wmt14_en_fr(root, out)
    before = {name: (out / name).read_bytes() for name in EN_FR_OUTPUTS + ["manifest.json"]}
    _break(root, "counts")
    with pytest.raises(UserError):
        prepare_wmt14_en_fr(root, out)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_en_fr_files_doc_names_every_archive_and_the_data_doc_lists_it():
    for archive in ("training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz",
                    "training-parallel-un.tgz", "training-parallel-nc-v9.tgz", "training-giga-fren.tar",
                    "dev.tgz", "test-full.tgz"):
        assert archive in WMT14_EN_FR_FILES
    readme = (Path(__file__).parent.parent / "docs" / "data.md").read_text(encoding="utf-8")
    for line in WMT14_EN_FR_FILES.splitlines()[1:]:   # the generated list, line for line
        assert line in readme, line
