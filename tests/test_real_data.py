"""Real text: the Multi30K and Penn Treebank preparations (on ../shared/data when it is there, and on small
fixtures of every malformed case), WMT's gzipped giga-fren, BLEU tok lc, and `evaluate` on a finished run."""

import gzip
import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.data.multi30k import prepare_multi30k
from harness.data.ptb import SAMPLE_SPLITS, prepare_ptb
from harness.data.readers import read_lines
from harness.data.trees import parse_tree
from harness.errors import UserError
from harness.eval.bleu import lc_norm_tok, multi_bleu, tokenized_bleu, tokenized_lc_bleu
from tests.helpers import new_store

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MULTI30K, PTB = SHARED / "multi30k", SHARED / "ptb-wsj-sample"
needs_multi30k = pytest.mark.skipif(not (MULTI30K / "train.en.gz").is_file(),
                                    reason=f"Multi30K's raw files are not in {MULTI30K} (see the README's Real data "
                                           "section)")
needs_ptb = pytest.mark.skipif(not (PTB / "combined" / "wsj_0001.mrg").is_file(),
                               reason=f"the Penn Treebank sample is not in {PTB} (see the README's Real data section)")


def write(path: Path, data, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if gz:
        path = path.with_name(path.name + ".gz")
        raw = gzip.compress(raw)
    path.write_bytes(raw)
    return path


def fake_multi30k(root: Path, gz: bool = True, extra: bool = True) -> Path:
    """Multi30K's raw layout with a few made-up lines a split, gzipped as the repository has them."""
    lines = {"train": (["A dog runs.", "Two men sit on a bench."], ["Ein Hund rennt.", "Zwei Männer sitzen auf einer "
                                                                                       "Bank."],
                       ["Un chien court.", "Deux hommes assis sur un banc."]),
             "val": (["A cat sleeps."], ["Eine Katze schläft."], ["Un chat dort."]),
             "test_2016_flickr": (["A girl jumps.", "A red car."], ["Ein Mädchen springt.", "Ein rotes Auto."],
                                  ["Une fille saute.", "Une voiture rouge."])}
    if extra:
        lines["test_2017_flickr"] = (["A boy swims."], ["Ein Junge schwimmt."], ["Un garçon nage."])
    for stem, (en, de, fr) in lines.items():
        for lang, text in (("en", en), ("de", de), ("fr", fr)):
            write(root / f"{stem}.{lang}", "".join(t + "\n" for t in text), gz)
    return root


def test_multi30k_reads_gzipped_and_plain_files_alike_and_keeps_the_second_test_set(tmp_path):
    a = prepare_multi30k(fake_multi30k(tmp_path / "gz"), tmp_path / "out-gz", "en-de")
    b = prepare_multi30k(fake_multi30k(tmp_path / "plain", gz=False), tmp_path / "out-plain", "en-de")
    names = sorted(os.listdir(tmp_path / "out-gz"))
    assert names == sorted(["train.en", "train.de", "dev.en", "dev.de", "test.en", "test.de", "test_2017_flickr.en",
                            "test_2017_flickr.de", "manifest.json"])
    for name in names[:-1] if names[-1] == "manifest.json" else names:
        if name != "manifest.json":
            assert (tmp_path / "out-gz" / name).read_bytes() == (tmp_path / "out-plain" / name).read_bytes()
    assert read_lines(tmp_path / "out-gz/dev.de") == ["Eine Katze schläft."]          # dev = val
    assert read_lines(tmp_path / "out-gz/test.en") == ["A girl jumps.", "A red car."]   # test = test_2016_flickr
    assert a["splits"]["test_2017_flickr"]["lines"] == b["splits"]["test_2017_flickr"]["lines"] == 1
    assert a["splits"]["train"]["from"] == ["train.en.gz", "train.de.gz"]
    assert any("29000" in w for w in a["warnings"])      # the fixture is not the released size: said, not refused
    fr = prepare_multi30k(tmp_path / "gz", tmp_path / "out-fr", "en-fr")
    assert read_lines(tmp_path / "out-fr/train.fr")[1] == "Deux hommes assis sur un banc." and fr["pair"] == "en-fr"


def test_a_clone_of_the_repository_is_found_under_data_task1_raw(tmp_path):
    fake_multi30k(tmp_path / "repo" / "data" / "task1" / "raw")
    manifest = prepare_multi30k(tmp_path / "repo", tmp_path / "out")
    assert manifest["splits"]["dev"]["lines"] == 1


def _break_multi30k(root: Path, case: str) -> str:
    if case == "missing":
        (root / "val.de.gz").unlink()
        return "val.de.gz"
    if case == "counts":
        write(root / "train.de", "Ein Hund rennt.\n", gz=True)
        return "train.en.gz has 2 lines but"
    if case == "encoding":
        write(root / "test_2016_flickr.de", "Ein M\xe4dchen springt.\nEin rotes Auto.\n".encode("latin-1"), gz=True)
        return "test_2016_flickr.de.gz: line 1 is not valid UTF-8"
    if case == "empty_file":
        write(root / "val.en", b"", gz=True)
        write(root / "val.de", b"", gz=True)
        return "val.en.gz: file is empty"
    if case == "empty_line":
        write(root / "train.en", "A dog runs.\n \n", gz=True)
        return "train.en.gz: line 2 is empty"
    if case == "bad_gzip":
        (root / "train.de.gz").write_bytes(b"\x1f\x8b\x08\x00not really gzip")
        return "train.de.gz: not a readable gzip file"
    if case == "both":
        write(root / "val.en", "A cat sleeps.\n")
        return "both val.en and val.en.gz"
    if case == "pair":
        return "--pair 'en-xx' is not a Multi30K task 1 pair"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing", "counts", "encoding", "empty_file", "empty_line", "bad_gzip", "both",
                                  "pair"])
def test_multi30k_bad_input_is_one_sentence_exit_2_and_nothing_written(capsys, tmp_path, case):
    root = fake_multi30k(tmp_path / "raw")
    needle = _break_multi30k(root, case)
    out = tmp_path / "out"
    code = main(["data", "prepare", "multi30k", "--from", str(root), "--pair", "en-xx" if case == "pair" else "en-de",
                 "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    assert needle in lines[0]
    assert not out.exists() or os.listdir(out) == []


def test_multi30k_bad_input_keeps_a_previous_complete_output(tmp_path):
    root, out = fake_multi30k(tmp_path / "raw"), tmp_path / "out"
    prepare_multi30k(root, out)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    _break_multi30k(root, "counts")
    with pytest.raises(UserError):
        prepare_multi30k(root, out)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


@needs_multi30k
@pytest.mark.parametrize("pair", ["en-de", "en-fr"])
def test_multi30k_real_files(tmp_path, pair):
    manifest = prepare_multi30k(MULTI30K, tmp_path / "out", pair)
    tgt = pair[-2:]
    assert {s: v["lines"] for s, v in manifest["splits"].items()} == {
        "train": 29_000, "dev": 1_014, "test": 1_000, "test_2017_flickr": 1_000}
    assert manifest["warnings"] == []
    first = {"de": "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
             "fr": "Deux jeunes hommes blancs sont dehors près de buissons."}[tgt]
    assert read_lines(tmp_path / "out" / f"train.{tgt}")[0] == first
    assert read_lines(tmp_path / "out/test.en")[0] == "A man in an orange hat starring at something."


def test_wmt_giga_fren_is_read_gzipped_as_its_tar_holds_it(tmp_path):
    from harness.data.wmt import prepare_wmt14_en_fr
    from tests.helpers import fake_wmt_fr
    plain = prepare_wmt14_en_fr(fake_wmt_fr(tmp_path / "plain"), tmp_path / "out-plain")
    root = fake_wmt_fr(tmp_path / "gz")
    for lang in ("en", "fr"):
        p = root / f"giga-fren.release2.fixed.{lang}"
        write(p, p.read_bytes(), gz=True)
        p.unlink()
    gz = prepare_wmt14_en_fr(root, tmp_path / "out-gz")
    assert (tmp_path / "out-gz/train.fr").read_bytes() == (tmp_path / "out-plain/train.fr").read_bytes()
    assert gz["sources"]["train"][-1]["fr"] == "giga-fren.release2.fixed.fr.gz"
    assert gz["outputs"] == plain["outputs"]


# ------------------------------------------------------------------------------------------ Penn Treebank

MRG = """
( (S
    (NP-SBJ-1 (DT The) (NN dog) )
    (VP (VBZ wants)
      (S (NP-SBJ (-NONE- *-1) )
        (VP (TO to) (VP (VB run) ))))
    (. .) ))
( (S (NP-SBJ (PRP It) ) (VP (VBD rained) ) (. .) ))
"""


def test_ptb_cleaning_removes_empty_elements_and_function_tags(tmp_path):
    write(tmp_path / "c" / "wsj_0001.mrg", MRG)
    write(tmp_path / "c" / "wsj_0150.mrg", MRG)
    write(tmp_path / "c" / "wsj_0170.mrg", MRG)
    manifest = prepare_ptb(tmp_path / "c", tmp_path / "out")
    trees = read_lines(tmp_path / "out/train.tree")
    assert trees[0] == "( (S (NP (DT The) (NN dog)) (VP (VBZ wants) (S (VP (TO to) (VP (VB run))))) (. .)))"
    assert parse_tree(trees[1]).words() == ["It", "rained", "."]
    assert {s: v["sentences"] for s, v in manifest["splits"].items()} == {"train": 2, "dev": 2, "test": 2}
    assert manifest["layout"] == "files" and manifest["split_rule"]["test"] == "wsj_0160 and above"


def test_ptb_split_depends_on_the_file_number_only(tmp_path):
    # A folder of only held-back files (above the sample's 179) is all test, as it is beside the others.
    write(tmp_path / "c" / "wsj_0185.mrg", MRG)
    manifest = prepare_ptb(tmp_path / "c", tmp_path / "out")
    assert list(manifest["splits"]) == ["test"]
    assert sorted(os.listdir(tmp_path / "out")) == ["manifest.json", "test.tree"]
    assert SAMPLE_SPLITS == {"train": (1, 139), "dev": (140, 159), "test": (160, None)}


def test_ptb_full_wsj_sections_use_the_standard_split(tmp_path):
    for section in ("00", "02", "21", "22", "23", "24"):
        write(tmp_path / "wsj" / section / f"wsj_{section}01.mrg", MRG)
    manifest = prepare_ptb(tmp_path, tmp_path / "out")   # found under DIR/wsj, as in the LDC release
    assert manifest["layout"] == "sections"
    assert {s: v["files"] for s, v in manifest["splits"].items()} == {"train": 2, "dev": 1, "test": 1}
    assert manifest["splits"]["test"]["first"] == "wsj_2301.mrg"


@pytest.mark.parametrize("case,needle", [
    ("unbalanced", "never closed"),
    ("nothing", "no wsj_NNNN.mrg files"),
    ("no_test_section", "without .mrg files for test (section 23)"),
    ("bad_tree", "cannot read the tree"),
])
def test_ptb_bad_input_is_one_sentence_exit_2_and_nothing_written(capsys, tmp_path, case, needle):
    src = tmp_path / "src"
    if case == "unbalanced":
        write(src / "wsj_0001.mrg", "( (S (NP (DT The) (NN dog)) (VP (VBZ runs))\n")
    elif case == "nothing":
        write(src / "README", "no trees here\n")
    elif case == "no_test_section":
        for section in ("02", "22"):
            write(src / section / f"wsj_{section}01.mrg", MRG)
    else:
        write(src / "wsj_0001.mrg", "( (S (NP (DT The) dog (NN dog)) (VP (VBZ runs))) )\n")
    out = tmp_path / "out"
    code = main(["data", "prepare", "ptb", "--from", str(src), "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    assert needle in lines[0]
    assert not out.exists() or os.listdir(out) == []


@needs_ptb
def test_ptb_real_sample_counts_and_cleaning(tmp_path):
    manifest = prepare_ptb(PTB, tmp_path / "out")    # finds combined/ below the folder
    counts = {s: v["sentences"] for s, v in manifest["splits"].items()}
    assert counts == {"train": 3068, "dev": 328, "test": 273}      # counted here: 3,669 in wsj_0001-0179
    assert manifest["splits"]["train"]["last"] == "wsj_0139.mrg"
    text = (tmp_path / "out/train.tree").read_text(encoding="utf-8")
    assert "-NONE-" not in text and "NP-SBJ" not in text and "(NP-" not in text
    first = parse_tree(read_lines(tmp_path / "out/train.tree")[0])
    assert first.words()[:3] == ["Pierre", "Vinken", ","]


def test_the_parse_task_reads_a_prepared_ptb_directory(tmp_path):
    from harness.data.corpus import DataConfig, load_dataset
    for n in (1, 2, 150, 170):
        write(tmp_path / "c" / f"wsj_{n:04d}.mrg", MRG)
    prepare_ptb(tmp_path / "c", tmp_path / "ptb")
    data = load_dataset(DataConfig(name=str(tmp_path / "ptb"), task="parse", cache_dir=str(tmp_path / "cache")),
                        vocab_size=60)
    assert data.train.src_text[0] == "The dog wants to run ."
    assert data.train.tgt_text[0] == "(S (NP XX XX )NP (VP XX (S (VP XX (VP XX )VP )VP )S )VP XX )S"


# ------------------------------------------------------------------------------------------ BLEU tok lc

def test_bleu_tok_lc_is_multi_bleu_on_the_datasets_lc_norm_tok_form():
    hyps = ["Ein Mann mit einem Hut, der etwas anstarrt.", "Zwei Hunde spielen im Schnee."]
    refs = ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.", "zwei hunde spielen im schnee."]
    lc = tokenized_lc_bleu(hyps, refs)
    assert lc.score == multi_bleu([lc_norm_tok(h) for h in hyps], [lc_norm_tok(r) for r in refs]).score
    assert lc.score > tokenized_bleu(hyps, refs).score    # "Zwei Hunde" matches "zwei hunde" only lowercased
    assert tokenized_lc_bleu(["Le Chien Noir Court."], ["le chien noir court ."], lang="fr").score == 100.0
    # Hyphens stay inside words, as in the dataset's files (tokenizer.perl without -a): "3-jähriges" is one
    # token, so a hypothesis that gets only its first part right earns no unigram for it.
    assert lc_norm_tok("Ein 3-jähriges Kind.") == "ein 3-jähriges kind ."
    assert tokenized_lc_bleu(["ein 3-jähriges kind ."], ["ein 3-jähriges kind ."], tokenized=True).score == 100.0


def test_lc_norm_tok_matches_the_datasets_moses_scripts_line_for_line():
    # tests/fixtures/moses_lc_norm_tok.tsv: 40 sentences written for the test (not Multi30K's), each with the
    # output of the dataset's own pipeline (lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l L
    # from its vendored Moses 3a0631a), quotes, guillemets, no-break spaces, abbreviations and apostrophes.
    rows = [ln.rstrip("\n").split("\t") for ln in
            (Path(__file__).parent / "fixtures" / "moses_lc_norm_tok.tsv").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 40 and {r[0] for r in rows} == {"en", "de", "fr"}
    for lang, raw, perl in rows:
        assert lc_norm_tok(raw, lang) == perl, raw


# ------------------------------------------------------------------------------------------ evaluate

def _tiny_run(tmp_path: Path, average_last: int = 2, form: str = "raw"):
    """A few steps of a small model on a made-up Multi30K-shaped directory, test scored as Table 2 does
    (form lc.norm.tok: the directory prepared in the literature's tokenized form)."""
    from harness.data.corpus import DataConfig
    from harness.train import TrainConfig, train
    from model import TransformerConfig
    animals = [("dog", "Hund"), ("cat", "Katze"), ("horse", "Pferd"), ("bird", "Vogel")]
    verbs = [("runs", "rennt"), ("sleeps", "schläft"), ("jumps", "springt"), ("sits", "sitzt")]
    en = [f"A {a} {v} here." for a, _ in animals for v, _ in verbs]
    de = [f"Ein {b} {w} hier." for _, b in animals for _, w in verbs]
    raw = tmp_path / "raw"
    for stem, rows in (("train", range(16)), ("val", range(0, 16, 3)), ("test_2016_flickr", range(1, 16, 4)),
                       ("test_2017_flickr", range(2, 16, 5))):
        write(raw / f"{stem}.en", "".join(en[i] + "\n" for i in rows), gz=True)
        write(raw / f"{stem}.de", "".join(de[i] + "\n" for i in rows), gz=True)
    prepare_multi30k(raw, tmp_path / "m30k", form=form, tokenize=lc_norm_tok)
    prepare_multi30k(raw, tmp_path / "m30k-raw")
    model = TransformerConfig(vocab_size=60, d_model=32, d_ff=64, n_heads=4, n_layers=1, max_len=64)
    cfg = TrainConfig(steps=6, warmup=3, max_tokens=400, batch_tokens=400, checkpoint_every=2, checkpoint_minutes=0,
                      log_every=2, max_extra=5, beam_size=2, average_last=average_last, eval_test=True)
    data = DataConfig(name=str(tmp_path / "m30k"), cache_dir=str(tmp_path / "cache"))
    return train(model, cfg, data, tmp_path / "run", quiet=True), tmp_path / "run", tmp_path / "m30k"


def test_evaluate_scores_the_final_averaged_weights_as_the_run_did(tmp_path, capsys):
    from harness.train.rescore import rescore
    metrics, run, data = _tiny_run(tmp_path)
    assert (run / "bpe.model").is_file()
    again = rescore(run, data, "test")
    for key in ("test_ppl", "test_bleu", "test_bleu_tok", "test_bleu_tok_lc"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-6), key
    assert again["test_checkpoints_averaged"] == 2 and again["test_sentences"] == 4
    # The second test set, under its own name; the BPE model comes from the run even when the data is gone
    (tmp_path / "cache").rename(tmp_path / "cache-moved")
    code = main(["evaluate", str(run), "--data", str(data), "--split", "test_2017_flickr", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["test_2017_flickr_sentences"] == 3 and "test_2017_flickr_bleu_tok_lc" in out
    assert out["mlflow_run_id"] is None           # a `train` run has no MLflow run to log to


def test_a_run_on_the_tokenized_form_is_scored_on_it_and_a_raw_test_set_is_brought_into_it(tmp_path, capsys):
    from harness.train.rescore import rescore
    metrics, run, data = _tiny_run(tmp_path, form="lc.norm.tok")
    assert (data / "test.de").read_text(encoding="utf-8").splitlines()[0] == "ein hund schläft hier ."
    assert "test_bleu_tok_lc" in metrics and "test_bleu" not in metrics and "test_bleu_tok" not in metrics
    # the same test set, prepared raw: lc_norm_tok brings it into the run's form, and the score is the same
    raw = rescore(run, tmp_path / "m30k-raw", "test")
    assert raw["test_bleu_tok_lc"] == pytest.approx(metrics["test_bleu_tok_lc"], abs=1e-9)
    assert raw["test_ppl"] == pytest.approx(metrics["test_ppl"], rel=1e-6)
    # a run on raw text cannot be scored on tokenized text: one sentence, exit 2
    _, raw_run, _ = _tiny_run(tmp_path / "second")
    code = main(["evaluate", str(raw_run), "--data", str(data), "--split", "test", "--no-log"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "holds Multi30K's lc.norm.tok text, but the run trained on raw" in err


def test_evaluate_one_checkpoint_scores_those_weights_alone(tmp_path, capsys):
    """--checkpoint STEP: the weights of that kept checkpoint, not the final average (a point of a learning
    curve, scored on dev); a step the run did not keep is one sentence naming the steps it kept."""
    import torch

    from harness.train.checkpoint import average_checkpoints
    from harness.train.rescore import final_weights, rescore
    _, run, data = _tiny_run(tmp_path)
    weights, paths = final_weights(run, 2, checkpoint=4)
    assert [p.name for p in paths] == ["step_00000004.pt"]
    assert all(torch.equal(weights[k], v) for k, v in average_checkpoints(paths).items())
    final, _ = final_weights(run, 2)
    assert any(not torch.equal(final[k], weights[k]) for k in final)     # the average of steps 4 and 6 differs
    got = rescore(run, data, "dev", checkpoint=4)
    assert got["dev_checkpoint_step"] == 4 and got["dev_checkpoints_averaged"] == 1
    code = main(["evaluate", str(run), "--data", str(data), "--split", "dev", "--checkpoint", "2", "--no-log"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "kept no checkpoint of that step; it kept steps 4, 6" in err


def test_evaluate_constrained_asks_for_the_tree_constraint_even_where_the_run_did_not(tmp_path, monkeypatch):
    import harness.train.rescore as rescore_mod
    _, run, data = _tiny_run(tmp_path)
    seen = []
    real = rescore_mod.evaluate
    monkeypatch.setattr(rescore_mod, "evaluate", lambda *a, **kw: seen.append(kw["constrained"]) or real(*a, **kw))
    assert main(["evaluate", str(run), "--data", str(data), "--split", "dev", "--no-log", "--json"]) == 0
    assert main(["evaluate", str(run), "--data", str(data), "--split", "dev", "--no-log", "--json",
                 "--constrained"]) == 0
    assert seen == [False, True]


@pytest.mark.parametrize("case,needle", [
    ("no_run", "no config.json"),
    ("no_split", "has no test_2018_flickr.src/test_2018_flickr.tgt"),
    ("no_data", "not a directory"),
])
def test_evaluate_bad_input_is_one_sentence_exit_2(tmp_path, capsys, case, needle):
    _, run, data = _tiny_run(tmp_path, average_last=0)
    args = {"no_run": [str(tmp_path), "--data", str(data)],
            "no_split": [str(run), "--data", str(data), "--split", "test_2018_flickr"],
            "no_data": [str(run), "--data", str(tmp_path / "nowhere")]}[case]
    code = main(["evaluate", *args, "--no-log"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_evaluate_logs_to_the_trials_child_run_without_touching_its_own_metrics(tmp_path):
    from mlflow import MlflowClient

    from harness.tracking import RUN_POINTER, log_evaluation
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp = client.create_experiment("t", artifact_location=(tmp_path / "mlruns").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.log_metric(run_id, "test_bleu", 30.0)
    (tmp_path / "trial").mkdir()
    (tmp_path / "trial" / RUN_POINTER).write_text(json.dumps({"tracking_uri": uri, "run_id": run_id,
                                                              "experiment_id": exp}))
    scored = {"test_bleu": 28.5, "sacrebleu_signature": "x"}
    assert log_evaluation(tmp_path / "trial", "multi30k-en-de/test", scored) == run_id
    log_evaluation(tmp_path / "trial", "multi30k-en-de/test_2017_flickr", {"test_2017_flickr_bleu": 25.0})
    data = client.get_run(run_id).data
    assert data.metrics["test_bleu"] == 30.0  # the trial's own figure stays
    assert data.metrics["eval/multi30k-en-de/test_bleu"] == 28.5
    assert data.metrics["eval/multi30k-en-de/test_2017_flickr_bleu"] == 25.0
    assert data.tags["evaluated_splits"] == "multi30k-en-de/test,multi30k-en-de/test_2017_flickr"
    assert log_evaluation(tmp_path, "x/test", {}) is None  # not a trial's directory
    # One checkpoint's scores: a curve under eval/<data>/checkpoint/, by step, beside the final weights' scores
    log_evaluation(tmp_path / "trial", "multi30k-en-de/dev", {"dev_bleu": 20.0}, checkpoint=400)
    log_evaluation(tmp_path / "trial", "multi30k-en-de/dev", {"dev_bleu": 24.0}, checkpoint=800)
    history = client.get_metric_history(run_id, "eval/multi30k-en-de/checkpoint/dev_bleu")
    assert sorted((m.step, m.value) for m in history) == [(400, 20.0), (800, 24.0)]
    assert "multi30k-en-de/dev@800" in client.get_run(run_id).data.tags["evaluated_splits"]
    assert client.get_run(run_id).data.metrics["eval/multi30k-en-de/test_bleu"] == 28.5
