"""The command line: bad input gives one sentence on stderr and exit 2; good input works end to end."""

import argparse
import json
import re
from pathlib import Path

import pytest

from harness.bench import gpu_check
from harness.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_sentence_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, needle", [
    (["train", "--preset", "paper_bse", "--out", "{tmp}/r"], "did you mean paper_base"),
    (["train", "--set", "n_head=4", "--out", "{tmp}/r"], "did you mean n_heads"),
    (["train", "--set", "d_model=wide", "--out", "{tmp}/r"], "d_model must be an integer"),
    (["train", "--set", "d_model=100", "--set", "n_heads=3", "--out", "{tmp}/r"], "not divisible"),
    (["train", "--set", "positional=absolute", "--out", "{tmp}/r"], "positional must be one of"),
    (["train", "--set", "steps", "--out", "{tmp}/r"], "key=value"),
    (["train", "--set", "seed=3", "--out", "{tmp}/r"], "qualify it"),
    (["train", "--set", "train.label_smoothing=1.5", "--out", "{tmp}/r"], "label_smoothing"),
    (["train", "--data", "{tmp}/missing", "--out", "{tmp}/r"], "neither 'synth' nor an existing directory"),
    (["train", "--row", "base", "--out", "{tmp}/r"], "give the study with --study"),
    (["train", "--study", "studies/table3.yaml", "--out", "{tmp}/r"], "--study needs --row"),
    (["train", "--study", "studies/table3.yaml", "--row", "C9", "--out", "{tmp}/r"], "has no row 'C9'"),
    (["data", "synth", "--out", "{tmp}/c", "--pairs", "0"], "1"),
    (["data", "prepare", "wmt14-en-de", "--from", "{tmp}/nowhere", "--out", "{tmp}/w"], "nowhere"),
    (["data", "prepare", "wmt14-en-fr", "--from", "{tmp}/nowhere", "--out", "{tmp}/w"], "nowhere"),
    (["data", "prepare", "wmt15", "--from", "{tmp}", "--out", "{tmp}/w"], "unknown corpus"),
    (["data", "prepare", "wmt14-en-es", "--from", "{tmp}", "--out", "{tmp}/w"], "wmt14-en-de, wmt14-en-fr"),
    (["bench", "--preset", "huge"], "unknown preset"),
    (["train", "--preset", "tiny", "--out", "{tmp}/r"], "now called 'cpu_d128'"),
    (["bench", "--dtype", "fp8"], "--dtype"),
    (["probe", "scaling", "--device", "tpu"], "not a torch device"),
    (["probe", "flops", "--preset", "paper_huge"], "preset"),
    (["probe", "evalb", "{tmp}/gold.txt", "{tmp}/test.txt"], "gold.txt"),
    (["run", "studies/table3.yaml", "--seeds", "3-1", "--dry-run"], "e.g. 0,1,2 or 0-9"),
    (["run", "studies/table3.yaml", "--seeds", "0-2,1", "--dry-run"], "names seed 1 more than once"),
])
def test_bad_input_is_one_sentence_and_exit_2(capsys, tmp_path, argv, needle):
    code, _, err = run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2
    assert needle in one_sentence_error(err)


def _data_dir(tmp_path, src_lines, tgt_lines, raw_tgt: bytes | None = None):
    d = tmp_path / "d"
    d.mkdir()
    for split in ("train", "dev", "test"):
        (d / f"{split}.src").write_text("".join(x + "\n" for x in src_lines), encoding="utf-8")
        if raw_tgt is not None:
            (d / f"{split}.tgt").write_bytes(raw_tgt)
        else:
            (d / f"{split}.tgt").write_text("".join(x + "\n" for x in tgt_lines), encoding="utf-8")
    return d


@pytest.mark.parametrize("case, needle", [
    ("unequal", "lines but"),
    ("empty", "empty"),
    ("latin1", "UTF-8"),
])
def test_bad_data_files_are_named(capsys, tmp_path, case, needle):
    if case == "unequal":
        d = _data_dir(tmp_path, ["a b", "c d", "e f"], ["x", "y"])
    elif case == "empty":
        d = _data_dir(tmp_path, ["a b"], [], raw_tgt=b"")
    else:
        d = _data_dir(tmp_path, ["a b"], [], raw_tgt="caf\xe9\n".encode("latin-1"))
    code, _, err = run(capsys, "train", "--data", str(d), "--out", str(tmp_path / "r"),
                       "--set", f"data.cache_dir={tmp_path / 'cache'}")
    assert code == 2
    line = one_sentence_error(err)
    assert needle in line and str(d) in line


def test_data_synth_writes_a_corpus(capsys, tmp_path):
    code, out, _ = run(capsys, "data", "synth", "--out", str(tmp_path / "c"), "--pairs", "1000",
                       "--dev-pairs", "10", "--test-pairs", "10", "--json")
    assert code == 0
    manifest = json.loads(out)
    assert manifest["seed"] == 1
    assert len((tmp_path / "c" / "train.src").read_text(encoding="utf-8").splitlines()) == 1000
    assert len((tmp_path / "c" / "dev.tree").read_text(encoding="utf-8").splitlines()) == 10


def test_train_end_to_end_prints_a_json_line(capsys, tmp_path):
    code, out, err = run(capsys, "train", "--preset", "cpu_d128", "--out", str(tmp_path / "run"), "--json", "--quiet",
                         "--set", "d_model=32", "--set", "d_ff=64", "--set", "n_layers=1", "--set", "vocab_size=300",
                         "--set", "train.steps=3", "--set", "max_tokens=800", "--set", "batch_tokens=800",
                         "--set", "bleu_sentences=4", "--set", "max_extra=4",
                         "--set", "data.train_pairs=1000", "--set", "data.dev_pairs=8", "--set", "data.test_pairs=8",
                         "--set", f"data.cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    metrics = json.loads(out.strip().splitlines()[-1])
    assert metrics["steps"] == 3 and metrics["dev_ppl"] > 1 and "dev_bleu" in metrics
    assert err == ""        # --quiet: no progress lines


def test_bench_prints_core_and_peer_throughput(capsys):
    code, out, _ = run(capsys, "bench", "--preset", "cpu_d128", "--tokens", "256", "--repeats", "1", "--no-decode",
                       "--json")
    assert code == 0
    report = json.loads(out)
    for name in ("core", "torch.nn.Transformer"):
        assert report["training"][name]["tgt_tokens_per_s"] > 0
    assert report["training"]["flops_per_step"] > 0


def test_bench_times_the_packed_core_on_varied_lengths_and_counts_only_real_tokens(capsys):
    code, out, _ = run(capsys, "bench", "--preset", "cpu_d128", "--tokens", "256", "--repeats", "1", "--no-decode",
                       "--vary", "--pack", "--json")
    assert code == 0
    t = json.loads(out)["training"]
    assert t["core (packed)"]["tgt_tokens_per_s"] > 0 and t["speedup_packed_over_peer"] > 0
    from harness.bench.speed import synthetic_batch
    from harness.probes.flops import count_analytic
    from model import get_preset
    src, _, tgt_out = synthetic_batch(256 // 25, 25, get_preset("cpu_d128").vocab_size, "cpu", vary=True)
    assert t["target_tokens"] == int((tgt_out != 0).sum()) < tgt_out.numel()          # padded, varied
    padded = count_analytic(get_preset("cpu_d128"), src.size(0), src.size(1), tgt_out.size(1))["step_flops"]
    assert 0 < t["flops_per_step"] < padded


def test_report_without_a_store_creates_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, _, err = run(capsys, "report")
    assert code == 2 and "no MLflow store" in one_sentence_error(err)
    assert list(tmp_path.iterdir()) == []


def test_probe_flops_prints_three_agreeing_counts(capsys):
    code, out, _ = run(capsys, "probe", "flops", "--preset", "cpu_d128", "--batch-tokens", "200", "--json")
    assert code == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report["agree"] is True


def test_probe_evalb_scores_two_files(capsys, tmp_path):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ runs)) (. .))\n(S (NP (NNS dogs)) (VP (VBP bark)))\n")
    test.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ runs)) (. .))\n(S (VP (NNS dogs) (VBP bark)))\n")
    code, out, _ = run(capsys, "probe", "evalb", str(gold), str(test), "--json")
    assert code == 0
    summary = json.loads(out)["summary"]["all"]
    # gold: S NP VP + S NP VP = 6 brackets (the period is deleted); test: 3 + S VP = 5; matched 3 + S = 4.
    assert summary["recall"] == pytest.approx(100 * 4 / 6) and summary["precision"] == pytest.approx(100 * 4 / 5)


def test_train_one_study_row_with_overrides(capsys, tmp_path):
    """`train --study --row` starts from the row as its trial resolves it (profile and all), --set on top,
    and prints the dev PPL measured every eval_every steps."""
    code, out, _ = run(capsys, "train", "--study", "studies/table3.yaml", "--row", "C4", "--threads", "1",
                       "--set", "steps=6", "--set", "eval_every=3", "--set", "bleu_sentences=2",
                       "--set", "data.train_pairs=300", "--out", str(tmp_path / "r"), "--quiet", "--json")
    assert code == 0
    metrics = json.loads(out.strip().splitlines()[-1])
    assert [s for s, _ in metrics["dev_ppl_curve"]] == [3, 6]
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["model"]["d_model"] == 32 and config["model"]["d_k"] == 4       # C4 at the tiny profile's widths
    assert config["data"]["max_words"] == 12 and config["train"]["steps"] == 6


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`python -m harness run STUDY --dry-run | head`: the reader leaves early; no traceback, the exit code of
    a tool stopped by SIGPIPE (128 + 13), as `cat` or `seq` give in a pipeline."""
    import subprocess
    import sys
    from pathlib import Path
    study = Path(__file__).parents[1] / "studies" / "table3.yaml"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f"{sys.executable} -m harness run {study} --dry-run | true"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141, (done.returncode, done.stderr)


def test_bench_times_a_study_rows_step_at_its_own_shapes_and_splits_it_by_part(capsys, tmp_path):
    """`bench --study S --row R`: the row's model and batches as its trial resolves them; the parts of the
    step add up to the profiled step; the same batch is timed on torch.nn.Transformer where it can build the row."""
    from tests.helpers import TWO_ROW_STUDY
    study = tmp_path / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")))
    code, out, _ = run(capsys, "bench", "--study", str(study), "--row", "A1", "--steps", "3", "--json")
    assert code == 0
    r = json.loads(out)
    assert (r["row"], r["profile"], r["threads"], r["vocab_size"]) == ("A1", "tiny", 1, 300)
    assert r["tgt_tokens_per_s"] > 0 and 0 < r["share_of_peak"] < 1.5 and r["flops_per_step"] > 0
    # The floor is the counted FLOPs at the peak: the step over the floor is the share of the peak, inverted.
    assert r["floor_ms"] == pytest.approx(r["flops_per_step"] / (r["peak_tflops"] * 1e12) * 1e3)
    split = r["split_ms"]
    assert abs(sum(split.values()) - r["profiled_step_ms"]) < 1e-6 * r["profiled_step_ms"] + 1e-9
    assert split["matmul: projections, FFN, vocabulary"] > 0 and split["optimizer"] > 0
    assert {o["op"] for o in r["top_operators"]} & {"aten::mm", "aten::addmm"}
    assert r["same_shape"]["eager"]["speedup_core_over_peer"] > 0          # n_heads 1: a model the peer builds
    code, _, err = run(capsys, "bench", "--study", str(study), "--steps", "3")
    assert code == 2 and "--study and --row go together" in err
    # --set lays a setting over the row, as `run --set` does: here the step timed with twice the batch.
    code, out, _ = run(capsys, "bench", "--study", str(study), "--row", "A1", "--steps", "3", "--no-compare",
                       "--set", "train.batch_tokens=1200", "--set", "train.max_tokens=1200", "--json")
    assert code == 0 and json.loads(out)["tgt_tokens_per_step"] > 1.5 * r["tgt_tokens_per_step"]
    code, _, err = run(capsys, "bench", "--set", "train.cpu_amp=true")
    assert code == 2 and "give --study and --row with it" in err


def test_the_step_split_puts_each_operator_in_its_part():
    from harness.bench.row import OTHER, part_of
    assert part_of("aten::addmm") == "matmul: projections, FFN, vocabulary"
    assert part_of("aten::bmm") == "matmul: attention (QK^T, AV)"
    assert part_of("aten::_softmax_backward_data") == "softmax"
    assert part_of("aten::native_layer_norm") == "norms"
    assert part_of("aten::_fused_adam_") == "optimizer"
    assert part_of("aten::add_") is None and OTHER


def test_list_names_the_studies_profiles_rows_claims_and_settings(capsys):
    code, out, _ = run(capsys, "list", "studies")
    assert code == 0 and any(ln.startswith("table3 ") and "multi30k" in ln for ln in out.splitlines())
    code, out, _ = run(capsys, "list", "profiles", "table3")
    assert code == 0 and "multi30k      21 rows, seeds 0,1,2, 63 trials; needs data" in out
    code, out, _ = run(capsys, "list", "rows", "table3", "--profile", "tiny")
    assert code == 0 and '  A1             {"n_heads": 1, "d_k": 512, "d_v": 512}' in out and "Dbase" in out
    code, out, _ = run(capsys, "list", "claims", "transformer_tiny")
    assert code == 0 and out.split()[:6] == ["transformer_tiny_reaches_published", "transformer_tiny",
                                             'test_bleu_tok_lc:', '"tiny"', "above", "41"]
    assert out.rstrip().endswith("[1 seed in profile tiny: cannot be decided without --seeds 0,1,2]")
    code, out, _ = run(capsys, "list", "claims", "table1")      # a value claim names its value, not only the margin
    assert code == 0 and 'exp_n: "sdpa" value 2 within ±0.25' in out and "value its path_formula within ±0" in out
    # `list` alone: every study, each with its profiles (the default first), its rows and its claims' ids
    code, out, _ = run(capsys, "list")
    blocks = {b.split(" ", 1)[0]: b for b in re.split(r"\n(?=\S)", out.split("\n\nmore:")[0])}
    assert code == 0 and set(blocks) == {p.stem for p in (ROOT / "studies").glob("*.yaml")}
    table3 = " ".join(blocks["table3"].split())
    assert "profiles (4, the default first): tiny, paper, multi30k, gpu" in table3
    assert "rows (22): base, A1, A2," in table3 and "Dbase, D3, D4, E, P0, big" in table3
    assert "claims (14): single_head_worse," in table3 and "dropout_helps" in table3
    assert "claims (1): more_trees_better" in " ".join(blocks["table4"].split())
    code, out, _ = run(capsys, "list", "settings", "train")
    assert code == 0 and "train.patience" in out and "train.lr_scale                     float        1.0 " in out
    code, out, _ = run(capsys, "list", "settings")
    assert "model.n_heads" in out and "data.name" in out
    # a study that does not exist, or none where one is needed: one sentence
    code, _, err = run(capsys, "list", "rows", "tabel3")
    assert code == 2 and "no study 'tabel3' (did you mean table3?)" in one_sentence_error(err)
    code, _, err = run(capsys, "list", "profiles")
    assert code == 2 and "`list profiles` names a study" in one_sentence_error(err)


def test_version_and_defaults_in_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("attention-harness ")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: cpu_d128)" in text and "(default: synth)" in text
    assert "(default: None)" not in text and "(default: tiny when it has one)" in text


def test_a_dry_run_takes_numbers_in_any_form_yaml_or_python_writes(capsys):
    # YAML 1.1 reads 1e-3 as a string: `--set train.lr=1e-3` was refused ("must be a number")
    # accepted, and said to be unread: the base's noam schedule takes its rate from d_model and warmup
    with pytest.warns(UserWarning, match="train.lr=0.001 is not read by schedule noam"):
        code, out, _ = run(capsys, "run", "studies/table3.yaml", "--rows", "base", "--dry-run", "--set",
                           "train.lr=1e-3")
    assert code == 0 and "base-s0" in out
    code, out, _ = run(capsys, "run", "studies/table3.yaml", "--rows", "base", "--dry-run", "--set",
                       "train.steps=1_000", "--set", "train.lr_scale=5E-1")
    assert code == 0 and any(ln.startswith("base-s0") and " 1000 " in ln for ln in out.splitlines())
    code, out, _ = run(capsys, "show", "table3", "base", "--set", "train.lr=5E-4", "--set", "train.steps=1_000")
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert lines["train.lr"].split()[1:] == ["0.0005", "--set"]
    assert lines["train.steps"].split()[1:] == ["1000", "--set"]


def test_run_takes_a_study_by_name_as_show_and_status_do(capsys):
    code, out, _ = run(capsys, "run", "table3", "--rows", "base", "--dry-run")
    assert code == 0 and out.startswith("studies/table3.yaml: study table3 v1") and "base-s0" in out
    code, _, err = run(capsys, "run", "tabel3", "--dry-run")
    assert code == 2 and "no study 'tabel3' (did you mean table3?)" in one_sentence_error(err)


@pytest.mark.parametrize("argv", [
    ["train", "--study", "tabel3", "--row", "base", "--out", "never-written"],
    ["bench", "--study", "tabel3", "--row", "base"],
    ["probe", "inference", "--study", "tabel3"],
    ["run", "tabel3", "--dry-run"],
    ["show", "tabel3", "base"],
    ["list", "rows", "tabel3"],
    ["list", "claims", "tabel3"],
])
def test_every_command_names_a_study_one_way(capsys, argv):
    """A study is named by its name or its file in every command that takes one, refused in the same sentence with
    the same did-you-mean and list of studies, exit 2."""
    code, out, err = run(capsys, *argv)
    msg = one_sentence_error(err)
    assert code == 2 and out == "" and "no study 'tabel3' (did you mean table3?); the studies: " in msg, (argv, msg)


def test_a_study_by_name_works_where_a_file_was_needed(capsys):
    code, out, _ = run(capsys, "list", "claims", "studies/table1.yaml")
    assert code == 0 and out and all(ln.split()[1] == "table1" for ln in out.splitlines())
    code, _, err = run(capsys, "run", "studies", "--dry-run")
    assert code == 2 and "studies is a folder; give one study, by its name or its file: " in one_sentence_error(err)


def test_seeds_take_ranges(capsys):
    # ten seeds of two rows, to settle a verdict that three leave near its line (docs/results.md)
    code, out, _ = run(capsys, "run", "studies/table3.yaml", "--rows", "base,C6", "--seeds", "0-9", "--dry-run")
    trials = [ln.split()[0] for ln in out.splitlines() if re.match(r"(base|C6)-s\d+ ", ln)]
    assert code == 0 and trials == [f"{r}-s{s}" for r in ("base", "C6") for s in range(10)]
    code, out, _ = run(capsys, "run", "studies/table3.yaml", "--rows", "base", "--seeds", "0-1,5", "--dry-run")
    assert [ln.split()[0] for ln in out.splitlines() if ln.startswith("base-s")] == ["base-s0", "base-s1", "base-s5"]


def test_show_names_where_each_setting_of_a_row_came_from(capsys):
    code, out, _ = run(capsys, "show", "table3", "A1", "--profile", "tiny", "--set", "train.steps=50")
    assert code == 0
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert lines["model.n_heads"].split()[1:] == ["1", "row"]                   # A1's own setting
    assert lines["model.d_k"].endswith("row x0.125 (profile scale)")           # the row's 512, scaled
    assert lines["model.n_kv_heads"].endswith("derived")                       # follows n_heads
    assert lines["model.p_drop"].endswith("preset paper_base")
    assert lines["train.steps"].split()[1:] == ["50", "--set"]
    assert lines["train.seed"].endswith("the trial's seed") and lines["data.train_pairs"].endswith("profile")
    code, _, err = run(capsys, "show", "table1", "sdpa")
    assert code == 2 and "scaling study" in err and len(err.strip().splitlines()) == 1
    assert "`python -m harness run studies/table1.yaml --dry-run` lists" in err        # a command that runs
    # a profile's own base is named as such (the tiny profile's average_last 5; the study's base says 0)
    code, out, _ = run(capsys, "show", "studies/table3.yaml", "base")
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert code == 0 and lines["train.average_last"].split()[1:] == ["5", "profile", "base"]
    # a study's resources, as `run --set` takes them, and where each came from
    code, out, _ = run(capsys, "show", "table3", "base", "--set", "resources.gpu=8")
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert code == 0 and lines["resources.gpu"].split()[1:] == ["8.0", "--set"]
    assert lines["resources.cpu"].split()[1:] == ["1", "profile"] and lines["resources.workers"].endswith("default")
    # on a prepared directory the made-up corpus's settings are shown as unread (the study file only names it)
    code, out, _ = run(capsys, "show", "table3", "C5", "--profile", "multi30k")
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert code == 0 and lines["data.train_pairs"].endswith("a prepared directory does not read it)")
    assert lines["data.task"].endswith("data default") and lines["data.name"].endswith("profile base")


def test_settings_lists_every_key_with_type_default_and_help_by_owner(capsys):
    code, out, _ = run(capsys, "settings")
    assert code == 0
    owners = [ln[2:] for ln in out.splitlines() if ln.startswith("# ")]
    assert {"model family transformer", "model family rnn", "training", "measurement heads", "data"} <= set(owners)
    steps = next(ln for ln in out.splitlines() if ln.startswith("train.steps "))
    assert steps.split()[1:3] == ["int", "100000"] and "§5.2" in steps
    heads = next(ln for ln in out.splitlines() if ln.startswith("train.heads_sentences "))
    assert "dev sentences probed" in heads
    # every key has its line of help (a family sharing a key with the transformer shares its help), the first
    # sentence of a comment of several lines whole, not cut at the comment's first line
    from harness import overrides
    assert [key for key, _, _, doc, _ in overrides.catalogue() if not doc.strip()] == []
    words = next(ln for ln in out.splitlines() if ln.startswith("model.word_positions "))
    assert words.endswith("positions count words, not tokens.")
    # a setting with choices names them, first (the decoder-only family's keeps the help it shares)
    scores = next(ln for ln in out.splitlines() if ln.startswith("model.attention_score "))
    assert scores.split()[1:3] == ["str", "'scaled'"] and "one of scaled | unscaled | additive; §3.2.1" in scores
    shared = [ln for ln in out.splitlines() if ln.startswith("model.positional ")]
    assert len(shared) == 2 and all("one of sinusoid | learned | rope | alibi | none; §3.5" in ln for ln in shared)
    code, out, _ = run(capsys, "settings", "resources")
    assert code == 0 and "resources.gpu" in out and "resources.workers" in out
    code, out, _ = run(capsys, "settings", "data")
    assert code == 0 and all(ln.startswith(("data.", "#")) for ln in out.splitlines() if ln.strip())
    assert run(capsys, "settings", "modle")[0] == 2


def test_the_readmes_add_a_row_example_runs(tmp_path, capsys, monkeypatch):
    """README, "Add a row, ...": the row line it gives, added under a copy of Table 3's rows, resolves with `show`
    and costs with `run --dry-run`, as the README says."""
    import re
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = re.search(r"under rows:, add the line\s+(\w+: \{[^}]*\})", readme).group(1)
    name = line.split(":")[0]
    text = (ROOT / "studies" / "table3.yaml").read_text(encoding="utf-8")
    assert "\nrows:\n" in text
    (tmp_path / "my-table3.yaml").write_text(text.replace("\nrows:\n", f"\nrows:\n  {line}\n", 1))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "show", "my-table3.yaml", name)
    assert code == 0 and re.search(r"^model\.n_heads\s+16\s+row$", out, re.M)
    code, out, _ = run(capsys, "run", "my-table3.yaml", "--rows", f"base,{name}", "--dry-run")
    assert code == 0 and f"{name}-s0" in out and "base-s0" in out


def _options(parser, path=("python -m harness",)):
    """(command path, option action) for every option of the parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, path + (name,))
        elif action.option_strings and action.help is not argparse.SUPPRESS:
            yield path, action, parser


def test_every_option_of_every_command_has_help_that_shows_its_default():
    # argparse prints nothing for an option without help text, not even its default
    found = list(_options(build_parser())) + list(_options(gpu_check.build_parser(), ("harness.gpu_check",)))
    assert len(found) > 100
    missing = [f"{' '.join(path)} {a.option_strings[0]}" for path, a, _ in found if not (a.help or "").strip()]
    assert missing == []
    for path, action, parser in found:
        if (action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS)
                or isinstance(action, argparse._HelpAction)):         # 0 == False: a default of 0 is shown too
            continue
        text = " ".join(parser._get_formatter()._format_action(action).split())   # this option's lines of --help
        shown = f"(default: {action.default})" in text or "default" in (action.help or "").lower()
        assert shown, f"{' '.join(path)} {action.option_strings[-1]} does not show its default {action.default!r}"
