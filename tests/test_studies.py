"""Study files: every file in studies/ resolves and smoke-runs; malformed files are refused before anything
starts; a real study runs through Ray Tune against a real `mlflow server`, and --resume reruns nothing."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UserError
from harness.paper import load_tables
from harness.study.kinds import KINDS, load_study
from tests.helpers import TWO_ROW_STUDY, new_store, start_mlflow_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted((ROOT / "studies").glob("*.yaml"))


def test_studies_are_found():
    assert {p.stem for p in STUDIES} >= {"table1", "table2", "table3", "table4", "modern"}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_profile_of_every_study_resolves(path):
    import yaml
    for profile in yaml.safe_load(path.read_text())["profiles"]:
        study = load_study(path, profile)
        assert study.trials and len({t.key for t in study.trials}) == len(study.trials)
        assert len({t.config_hash for t in study.trials}) == len(study.trials), "two rows resolve alike"


def test_table3_rows_are_the_papers_rows_in_the_paper_profile():
    study = load_study(ROOT / "studies" / "table3.yaml", "paper")
    paper = load_tables()["table3"]["rows"]
    assert [t.row for t in study.trials] == list(paper)
    for t in study.trials:
        row = paper[t.row]
        assert (t.model.n_layers, t.model.d_model, t.model.d_ff, t.model.n_heads, t.model.d_k,
                t.model.d_v, t.model.p_drop, t.train.label_smoothing, t.train.steps) == \
            (row["N"], row["d_model"], row["d_ff"], row["h"], row["d_k"], row["d_v"], row["P_drop"],
             row["eps_ls"], row["steps"]), t.row
        assert t.model.positional == row.get("positional", "sinusoid")


def test_tiny_profile_keeps_the_relations_between_rows():
    trials = {t.row: t for t in load_study(ROOT / "studies" / "table3.yaml", "tiny").trials}
    for row in ("base", "A1", "A2", "A3", "A4"):
        m = trials[row].model
        assert m.d_k * m.n_heads == m.d_model == trials["base"].model.d_model
    assert [trials[r].model.n_layers for r in ("C1", "C2", "base", "C3")] == [1, 2, 3, 4]
    assert trials["C5"].model.d_model == 4 * trials["C4"].model.d_model
    assert trials["big"].train.steps == 3 * trials["base"].train.steps


def _smoke(study, trials, tmp_path):
    """Each trial, shrunk by its kind (`smoke`: two training steps, a tiny probe grid), through the trial function
    that Ray Tune runs; its result checked as its kind says, and its MLflow child run finished."""
    from harness.tracking import StudyTracking
    from harness.trial import run_trial
    uri = new_store(tmp_path)
    tracking = StudyTracking(uri, study.name)
    parent = tracking.start_parent("smoke", {"profile": "tiny", "version": study.version}, {})
    ctx = {"uri": uri, "experiment_id": tracking.experiment_id, "parent_id": parent, "run_dir": str(tmp_path),
           "threads": 1, "tags": {"study": study.name}}
    for trial in trials:                        # each kind shrinks its own trial and says what its result shows
        kind = KINDS[trial.kind]
        small, expect = kind.smoke(trial, tmp_path)
        result = run_trial(small.to_dict(), ctx, kind)
        for key, want in expect.items():
            if isinstance(want, str):
                assert result[key] == result[want], (trial.key, key, want)
            else:
                assert want[0] <= result[key] <= want[1], (trial.key, key, result[key], want)
    runs = tracking.children(parent)
    assert sorted(r.data.tags["row"] for r in runs) == sorted(t.row for t in trials)
    assert all(r.info.status == "FINISHED" for r in runs)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_study_smoke_runs_each_row_for_two_steps(path, tmp_path):
    """Every row of the tiny profile (one seed): the whole suite's smoke run of every study."""
    study = load_study(path, "tiny", seeds=[0])
    assert len(_smoke(study, study.trials, tmp_path)) == len(study.rows)      # one finished child run a row


def _representatives() -> list[tuple[Path, str, str]]:
    """For the fast tier: one row for each study kind, each model family and each measurement, the first the study
    files give in their order (study, row, what it stands for); every row of every study smoke-runs in the slow tier."""
    seen, picks = set(), []
    for path in STUDIES:
        study = load_study(path, "tiny", seeds=[0])
        for t in study.trials:
            covers = {f"kind {t.kind}"}
            if t.model is not None:
                covers.add(f"family {getattr(t.model, 'family', 'transformer')}")
            if t.train is not None:
                covers |= {f"measurement {m.name}" for m, _ in t.train.active()}
            if covers - seen:
                picks.append((path, t.row, ", ".join(sorted(covers - seen))))
                seen |= covers
    return picks


@pytest.mark.parametrize("path, row, covers", _representatives(), ids=lambda x: x.stem if isinstance(x, Path) else x)
def test_one_row_of_each_kind_family_and_measurement_smoke_runs(path, row, covers, tmp_path):
    study = load_study(path, "tiny", [row], [0])
    assert [r.data.tags["row"] for r in _smoke(study, study.trials, tmp_path)] == [row]


BAD = {
    "unknown_key": ("rowz:", "rows:", "unknown key (did you mean rows?)"),
    "row_unknown_setting": ("A1: {n_heads: 1,", "A1: {n_head: 1,", "did you mean n_heads"),
    "wrong_type": ("version: 1", "version: one", "version: must be an integer"),
    "not_divisible": ("A1: {n_heads: 1, d_k: 512, d_v: 512}", "A1: {n_heads: 7}", "not divisible by n_heads=7"),
    "bad_scale": ("n_layers: 0.5, steps", "n_layers: -1, steps", "must be a positive number"),
    "bad_profile_seeds": ("    seeds: [0]               #", "    seeds: [zero]            #", "profiles.tiny.seeds"),
    # PyYAML keeps the last of two equal keys without a word: the study would run one C5 row of the two
    "duplicate_row": ("  C5: {d_model: 1024, d_k: 128, d_v: 128}\n",
                      "  C5: {d_model: 1024, d_k: 128, d_v: 128}\n  C5: {d_model: 768, d_k: 96, d_v: 96}\n",
                      "the key 'C5' appears twice in one mapping (line 27 and line 28)"),
    # PyYAML's message spreads the problem, its place and its context over lines: one sentence names all three
    "yaml_syntax": ("version: 1", "version: [1", "is not valid YAML: expected ',' or ']', but got ':' at line 8, "
                    "column 6 (while parsing a flow sequence begun at line 7, column 10)."),
}


BAD_PROBE = {
    "unknown_probe_key": ("sdpa: {layer: sdpa}", "sdpa: {layr: sdpa}", "unknown probe setting (did you mean layer?)"),
    "unknown_layer": ("sdpa: {layer: sdpa}", "sdpa: {layer: sdpaa}", "is not one of sdpa, plain"),
    "short_grid": ("ns: [128, 256, 512, 1024, 2048]", "ns: [128, 256]", "ns must be a list of at least 3"),
    "unknown_kind": ("kind: scaling", "kind: scalling", "unknown kind 'scalling' (did you mean scaling?)"),
}


@pytest.mark.parametrize("case", list(BAD_PROBE))
def test_malformed_probe_study_is_refused(case, tmp_path, capsys):
    text = (ROOT / "studies" / "table1.yaml").read_text()
    old, new, needle = BAD_PROBE[case]
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    assert main(["run", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_scaling_study_resolves_one_trial_per_layer():
    from harness.probes.scaling_spec import LAYERS
    study = load_study(ROOT / "studies" / "table1.yaml", "tiny")
    assert study.kind == "scaling" and {t.probe.layer for t in study.trials} == set(LAYERS)
    assert all(t.probe.device == "cpu" and t.probe.threads == 1 for t in study.trials)


def test_profiles_name_their_default_seeds():
    """A profile's seeds are its default; --seeds overrides them; a profile without any takes the study's."""
    modern = ROOT / "studies" / "modern.yaml"
    assert load_study(modern, "tiny").seeds == [0, 1, 2]
    assert load_study(modern, "tiny", seeds=[5]).seeds == [5]
    assert load_study(modern, "paper").seeds == [0]
    assert load_study(ROOT / "studies" / "table3.yaml", "tiny").seeds == [0]


def test_set_takes_a_number_in_any_notation():
    """YAML 1.1 reads 1e-3 (no dot) as a string; a float setting takes it as the number it is."""
    from harness import overrides
    assert overrides.parse_sets(["train.lr=1e-3", "lr_scale=2E0", "train.clip_norm=.5"])["train"] == \
        {"lr": 0.001, "lr_scale": 2.0, "clip_norm": 0.5}
    with pytest.raises(UserError, match="train.lr must be a number, got '1e-3x'"):
        overrides.parse_sets(["train.lr=1e-3x"])


def test_run_set_is_laid_over_every_row_after_the_profile():
    """`run --set data.seed=2` changes the corpus of every trial and nothing else; the trials' hashes change
    with it, so a resumed study never mistakes one corpus's runs for another's."""
    from harness import overrides
    path = ROOT / "studies" / "table3.yaml"
    plain = load_study(path, "tiny", ["base", "C1"], [0])
    moved = load_study(path, "tiny", ["base", "C1"], [0], sets=overrides.parse_sets(["data.seed=2", "steps=7"]))
    for a, b in zip(plain.trials, moved.trials):
        assert a.data.seed != 2 and b.data.seed == 2 and b.train.steps == 7
        assert dataclasses.replace(a.data, seed=0) == dataclasses.replace(b.data, seed=0)
        assert a.model == b.model and a.config_hash != b.config_hash
    assert moved.trials[1].model.n_layers == 1                    # the row's own settings are kept


def test_a_profile_changes_the_base_under_the_rows_and_single_rows_over_itself(tmp_path, capsys):
    """`profiles.P.base` sits under the rows (a row's own setting wins: Table 2's big keeps its 20 averaged
    checkpoints under Table 3's tiny averaging); `profiles.P.rows` sits over the profile (the D rows' smaller
    training set) and under `run --set`; neither is inherited by a row of another study that includes it."""
    from harness import overrides
    t3 = {t.row: t for t in load_study(ROOT / "studies" / "table3.yaml", "tiny").trials}
    assert t3["base"].train.average_last == 5 and t3["big"].train.average_last == 5
    assert load_study(ROOT / "studies" / "table3.yaml", "paper").trials[0].train.average_last == 0
    assert t3["D1"].data.train_pairs == t3["D2"].data.train_pairs < t3["base"].data.train_pairs
    assert t3["D3"].data == t3["base"].data
    t2 = {t.row: t for t in load_study(ROOT / "studies" / "table2.yaml", "tiny").trials}
    assert (t2["base"].train.average_last, t2["big"].train.average_last) == (5, 20)
    modern = load_study(ROOT / "studies" / "modern.yaml", "tiny").trials
    assert {t.data.train_pairs for t in modern} == {t3["base"].data.train_pairs}
    moved = load_study(ROOT / "studies" / "table3.yaml", "tiny", ["D1"], [0],
                       sets=overrides.parse_sets(["data.train_pairs=300"]))
    assert moved.trials[0].data.train_pairs == 300                 # --set is the last layer
    (tmp_path / "mine.yaml").write_text("study: mine\nversion: 1\nbase: {}\nrows: {base: {}}\n"
                                        "profiles:\n  tiny:\n    rows: {C9: {n_layers: 1}}\n")
    assert main(["run", str(tmp_path / "mine.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "profiles.tiny.rows.C9" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_run_set_is_refused_for_a_probe_study(capsys):
    assert main(["run", str(ROOT / "studies" / "table1.yaml"), "--set", "d_model=8", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "scaling study" in err and len(err.splitlines()) == 1


def test_a_profile_includes_another_study_files_profile_and_lays_its_own_settings_over_it(tmp_path):
    base = (ROOT / "studies" / "table3.yaml").read_text()
    (tmp_path / "table3.yaml").write_text(base)
    (tmp_path / "mine.yaml").write_text(
        "study: mine\nversion: 1\nbase: {preset: paper_base}\nrows: {base: {}, C1: {n_layers: 1}}\n"
        "profiles:\n  tiny:\n    include: table3.yaml:tiny\n    scale: {steps: 0.01}\n"
        "    train: {bleu_sentences: 7}\n    seeds: [3, 4]\n")
    mine, theirs = load_study(tmp_path / "mine.yaml", "tiny"), load_study(ROOT / "studies" / "table3.yaml", "tiny")
    (t,), (ref,) = [x for x in mine.trials if x.key == "base-s3"], [x for x in theirs.trials if x.key == "base-s0"]
    assert mine.seeds == [3, 4] and mine.resources["cpu"] == theirs.resources["cpu"] == 1
    assert t.model == ref.model and t.data == ref.data                 # taken whole from table3.yaml:tiny
    assert t.train.steps == 1000 and ref.train.steps == 1600     # scale: steps replaced, the rest kept
    assert t.train.warmup == ref.train.warmup and t.train.bleu_sentences == 7
    # a profile's own rows stay its own: table3.yaml:tiny's base takes the agreement measurement, mine's does not
    assert [m.name for m, _ in ref.train.active()] == ["agreement"] and not t.train.active()
    assert dataclasses.replace(t.train, steps=0, bleu_sentences=0, seed=0) == \
        dataclasses.replace(ref.train, steps=0, bleu_sentences=0, seed=0, measures=())


@pytest.mark.parametrize("include, needle", [("table3.yaml", "must be FILE:PROFILE"),
                                             ("nowhere.yaml:tiny", "does not exist"),
                                             ("table3.yaml:tiyn", "did you mean tiny"),
                                             ("mine.yaml:tiny", "includes itself")])
def test_a_bad_include_is_one_sentence(include, needle, tmp_path, capsys):
    (tmp_path / "table3.yaml").write_text((ROOT / "studies" / "table3.yaml").read_text())
    (tmp_path / "mine.yaml").write_text("study: mine\nversion: 1\nbase: {}\nrows: {base: {}}\n"
                                        f"profiles:\n  tiny:\n    include: {include}\n")
    assert main(["run", str(tmp_path / "mine.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_runner_keeps_table2s_counted_paper_costs_in_the_parent_run():
    import json

    from harness.probes.cost import training_costs
    from harness.study.runner import paper_tags
    t2, t3 = load_study(ROOT / "studies" / "table2.yaml", "tiny"), load_study(ROOT / "studies" / "table3.yaml", "tiny")
    assert json.loads(paper_tags(t2)["paper_costs"]) == json.loads(json.dumps(training_costs()))
    assert len(paper_tags(t2)["paper_costs"]) < 5000          # an MLflow tag value
    assert paper_tags(t3) == {}


def test_table4_follows_section_6_3():
    setup = load_tables()["table4"]["setup"]
    for t in load_study(ROOT / "studies" / "table4.yaml", "paper").trials:
        assert (t.model.n_layers, t.model.d_model) == (setup["n_layers"], setup["d_model"])
        assert (t.train.beam_size, t.train.alpha, t.train.max_extra) == \
            (setup["beam_size"], setup["alpha"], setup["max_extra"])
        assert t.data.task == "parse"
    vocab = {t.row: t.model.vocab_size for t in load_study(ROOT / "studies" / "table4.yaml", "paper").trials}
    assert vocab == {"wsj_only": setup["vocab_wsj"], "semi_supervised": setup["vocab_semi"]}


def test_table2_averages_as_the_paper_did():
    trials = {t.row: t for t in load_study(ROOT / "studies" / "table2.yaml", "paper").trials}
    assert trials["base"].train.average_last == 5 and trials["big"].train.average_last == 20
    assert all(t.train.eval_test for t in trials.values())
    assert trials["big"].train.steps == 300_000 and trials["big"].model.d_model == 1024


def test_table2_en_fr_rows_follow_sections_5_1_and_6_1():
    trials = {t.row: t for t in load_study(ROOT / "studies" / "table2.yaml", "paper").trials}
    assert list(trials) == ["base", "big", "base_enfr", "big_enfr", "gnmt", "convs2s"]
    for row in ("base", "big"):
        assert (trials[row].data.name, trials[row].model.vocab_size) == ("data/wmt14-en-de", 37000)
    for row in ("base_enfr", "big_enfr"):          # §5.1: WMT14 EN-FR, a 32000 word-piece vocabulary
        assert (trials[row].data.name, trials[row].model.vocab_size) == ("data/wmt14-en-fr", 32000)
        assert trials[row].train.eval_test
    assert (trials["big"].model.p_drop, trials["big_enfr"].model.p_drop) == (0.3, 0.1)   # §6.1
    big, big_fr = trials["big"], trials["big_enfr"]
    assert big.model.replace(p_drop=0.1, vocab_size=1) == big_fr.model.replace(p_drop=0.1, vocab_size=1)
    assert big.train == big_fr.train
    assert trials["base_enfr"].model == trials["base"].model.replace(vocab_size=32000)


@pytest.mark.parametrize("profile", ["tiny", "gpu"])
def test_table2_small_profiles_fill_both_columns_on_the_made_up_corpus(profile):
    """The EN-FR rows of the small profiles train on the corpus's French-like target; everything else about a
    row (widths, schedule, §6.1's P_drop 0.1 for big EN-FR) is its EN-DE twin's."""
    trials = {t.row: t for t in load_study(ROOT / "studies" / "table2.yaml", profile).trials if t.seed == 0}
    rivals = ["gnmt", "convs2s"] if profile == "tiny" else []            # calibrated on the made-up corpus only
    assert list(trials) == ["base", "big", "base_enfr", "big_enfr", *rivals]
    trials = {r: t for r, t in trials.items() if r not in rivals}
    assert {row: (t.data.name, t.data.target) for row, t in trials.items()} == {
        "base": ("synth", "de"), "big": ("synth", "de"), "base_enfr": ("synth", "fr"), "big_enfr": ("synth", "fr")}
    assert (trials["big"].model.p_drop, trials["big_enfr"].model.p_drop) == (0.3, 0.1)
    for de, fr in (("base", "base_enfr"), ("big", "big_enfr")):
        assert trials[de].model.replace(p_drop=0) == trials[fr].model.replace(p_drop=0)
        assert trials[de].train == trials[fr].train
        assert dataclasses.replace(trials[de].data, target="") == dataclasses.replace(trials[fr].data, target="")


def test_rows_outside_a_profiles_only_rows_are_refused_in_one_sentence(tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text("study: mine\nversion: 1\nbase: {}\n"
                                        "rows: {base: {}, big: {d_model: 1024}, big_enfr: {d_model: 1024}}\n"
                                        "profiles:\n  tiny:\n    only_rows: [base, big]\n")
    study = load_study(tmp_path / "mine.yaml", "tiny")
    assert study.rows == ["base", "big"] and {t.row for t in study.trials} == {"base", "big"}
    assert main(["run", str(tmp_path / "mine.yaml"), "--rows", "base,big_enfr", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "profile tiny does not run row 'big_enfr'" in err and "only_rows: base, big" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("prof, needle", [("only_rows: [base, bgi]", "'bgi' names no row of the study (did you mean "
                                                                     "big?)"),
                                          ("only_rows: []", "must be a non-empty list"),
                                          ("only_rows: base", "must be a non-empty list"),
                                          ("skip_rows: [bgi]", "'bgi' names no row of the study (did you mean big?)"),
                                          ("skip_rows: [base, big]", "leaves no row to run"),
                                          ("skip_rows: big", "must be a list"),
                                          ("only_rows: [base]\n    skip_rows: [big]", "not both")])
def test_a_bad_only_rows_or_skip_rows_is_one_sentence(prof, needle, tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text("study: mine\nversion: 1\nbase: {}\nrows: {base: {}, big: {d_model: 1024}}\n"
                                        f"profiles:\n  tiny:\n    {prof}\n")
    assert main(["run", str(tmp_path / "mine.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    key = "skip_rows" if "skip_rows" in prof else "only_rows"
    assert f"profiles.tiny.{key}" in err and needle in err and len(err.splitlines()) == 1


def test_table3s_paper_profiles_skip_dbase_and_the_tiny_one_trains_it_on_the_d_rows_data():
    """Dbase is the base on the dropout rows' training set: the tiny profile trains it on D1's 2,000 pairs; the
    paper and gpu profiles, whose D rows use the base's data, skip it (it would train exactly as the base),
    and asking for it there is refused in one sentence."""
    tiny = {t.row: t for t in load_study(ROOT / "studies" / "table3.yaml", "tiny").trials}
    assert tiny["Dbase"].data.train_pairs == tiny["D1"].data.train_pairs == 2000 != tiny["base"].data.train_pairs
    assert tiny["Dbase"].model == tiny["base"].model and tiny["Dbase"].config_hash != tiny["base"].config_hash
    for profile in ("paper", "gpu"):
        assert "Dbase" not in {t.row for t in load_study(ROOT / "studies" / "table3.yaml", profile).trials}
        with pytest.raises(UserError, match="does not run row 'Dbase' .*skip_rows Dbase"):
            load_study(ROOT / "studies" / "table3.yaml", profile, ["Dbase"])


def test_only_rows_is_not_inherited_through_include(tmp_path):
    """Like `rows`, an included profile's only_rows names the other study's rows: the including study runs all
    of its own rows unless it says otherwise."""
    for name in ("table2.yaml", "table3.yaml"):
        (tmp_path / name).write_text((ROOT / "studies" / name).read_text())
    (tmp_path / "mine.yaml").write_text("study: mine\nversion: 1\nbase: {}\nrows: {base: {}, base_enfr: {}}\n"
                                        "profiles:\n  tiny:\n    include: table2.yaml:tiny\n")
    assert load_study(tmp_path / "mine.yaml", "tiny").rows == ["base", "base_enfr"]


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_study_is_one_sentence_exit_2_and_nothing_started(case, tmp_path, capsys, monkeypatch):
    text = (ROOT / "studies" / "table3.yaml").read_text()
    old, new, needle = BAD[case]
    if case == "unknown_key":
        text = text.replace("\nrows:", "\nrowz:")
    else:
        assert old in text
        text = text.replace(old, new, 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    monkeypatch.chdir(tmp_path)
    code = main(["run", str(bad), "--profile", "tiny", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert needle in err and str(bad) in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


def test_a_study_file_that_is_not_utf8_is_one_sentence(tmp_path, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes((ROOT / "studies" / "table3.yaml").read_bytes().replace(b"# ", "# é".encode("latin-1"), 1))
    assert main(["run", str(bad), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {bad} is not UTF-8 text; save the study file as UTF-8."


@pytest.mark.parametrize("argv, needle", [
    (["--profile", "small"], "has no profile 'small'"),
    (["--rows", "base,A9"], "has no row 'A9'"),
    (["--seeds", "0,x"], "--seeds"),
    (["--profile", "paper"], "data prepare wmt14-en-de --from DIR --out data/wmt14-en-de"),
    (["--set", "data.sed=2"], "did you mean data.seed"),
    (["--set", "train.seed=2"], "--seeds"),
    (["--set", "n_heads=x"], "must be an integer"),
])
def test_bad_run_flags(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run", str(ROOT / "studies" / "table3.yaml"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists()


def test_missing_study_file(capsys):
    assert main(["run", "studies/nope.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_study_against_a_real_mlflow_server_then_resume_runs_nothing(tmp_path):
    import mlflow
    from mlflow import MlflowClient
    server, uri = start_mlflow_server(tmp_path, new_store(tmp_path, "server.db"), artifacts=tmp_path / "artifacts")
    try:
        study = tmp_path / "mini.yaml"
        study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")))
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
        cmd = [sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp_path / "runs")]
        first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "overhead" in first.stdout
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("mini")
        runs = client.search_runs([exp.experiment_id])
        parents = [r for r in runs if r.data.tags.get("kind") == "study"]
        children = [r for r in runs if r.data.tags.get("kind") == "trial"]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        assert sorted(r.data.tags["row"] for r in children) == ["A1", "base"]
        assert parents[0].data.tags["version.mlflow"] == mlflow.__version__
        # MLflow's own commit tag (its UI's "Source" commit), on the parent and on every trial, is the study's commit
        sha = parents[0].data.tags["git_sha"]
        assert {r.data.tags.get("mlflow.source.git.commit") for r in runs} == {sha} and sha
        for r in children:
            assert r.info.status == "FINISHED"
            assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
            assert r.data.metrics["dev_ppl"] > 1 and "dev_bleu" in r.data.metrics
            assert r.data.tags["dev_bleu_tok_parts"].startswith("BLEU = ")     # multi-bleu.perl's line
            assert r.data.params["model.n_heads"] in ("4", "1")
            assert {"study", "version", "profile", "seed", "config_hash", "git_sha", "hardware"} <= set(r.data.tags)
            import torch
            assert r.data.tags["version.torch"] == torch.__version__ and "CPU cores" in r.data.tags["hardware"]
            assert {f"version.{n}" for n in ("ray", "mlflow", "sacrebleu", "sentencepiece")} <= set(r.data.tags)
            assert len(client.get_metric_history(r.info.run_id, "train_loss")) == 3
            assert {a.path for a in client.list_artifacts(r.info.run_id)} >= {"config.json", "metrics.jsonl"}
            # the parent carries each row's key figure (one seed here: the trial's own)
            assert parents[0].data.metrics[f"{r.data.tags['row']}/dev_ppl"] == r.data.metrics["dev_ppl"]
        again = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=600)
        assert again.returncode == 0 and "nothing to run" in again.stdout, again.stdout + again.stderr
        assert len(client.search_runs([exp.experiment_id])) == len(runs)
    finally:
        stop_server(server)


@pytest.mark.slow
def test_ctrl_c_then_resume_finishes_the_rest_without_duplicate_runs(tmp_path):
    import signal

    from mlflow import MlflowClient
    study = tmp_path / "mini.yaml"
    text = TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")).replace("resources: {cpu: 1}", "resources: {cpu: 2}")
    text = text.replace("steps: 3,", "steps: 400,").replace("  A1: {n_heads: 1}", "  A1: {n_heads: 1}\n  C1: {d_ff: "
                                                                                  "32}")
    study.write_text(text)
    uri = new_store(tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    cmd = [sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp_path / "runs")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = MlflowClient(uri)
    deadline = time.time() + 300
    finished = []
    while time.time() < deadline and proc.poll() is None:
        exp = client.get_experiment_by_name("mini") if (tmp_path / "mlflow.db").exists() else None
        runs = client.search_runs([exp.experiment_id], "tags.kind = 'trial'") if exp else []
        finished = [r for r in runs if r.info.status == "FINISHED"]
        if finished:
            break
        time.sleep(0.5)
    assert finished, "no trial finished in time"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "--resume" in out, out
    # `status`, from another process, reads the interrupted invocation: one trial finished, the rest not, and
    # the command that continues it
    status = [sys.executable, "-m", "harness", "status", str(study), "--profile", "tiny"]
    seen = subprocess.run(status, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert seen.returncode == 0, seen.stdout + seen.stderr
    states = {line.split()[0]: line.split()[1] for line in seen.stdout.splitlines()[2:5]}
    assert sorted(states) == ["A1-s0", "C1-s0", "base-s0"] and "finished" in states.values(), seen.stdout
    assert set(states.values()) <= {"finished", "killed", "pending"}, seen.stdout
    assert seen.stdout.splitlines()[-1].startswith("not running (interrupted); `") and "--resume` continues" in \
        seen.stdout, seen.stdout
    again = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    seen = subprocess.run(status, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "3 trials: 3 finished" in seen.stdout and "every trial finished" in seen.stdout, seen.stdout
    exp = client.get_experiment_by_name("mini")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("kind") == "study"]
    children = [r for r in runs if r.data.tags.get("kind") == "trial"]
    assert len(parents) == 1 and parents[0].data.tags.get("resumed") == "true"
    assert sorted(r.data.tags["row"] for r in children) == ["A1", "C1", "base"]     # one run per trial
    assert all(r.info.status == "FINISHED" for r in children)
    # The trial that had finished before the interrupt was not run again.
    first = finished[0]
    assert client.get_run(first.info.run_id).info.end_time == first.info.end_time
    # Both invocations timed themselves on the parent (step 0 the first, 1 the resumed): the report sums them.
    from harness.logged import metric_history, study_wall_seconds
    beats = metric_history(uri, parents[0].info.run_id, "invocation_wall_seconds")
    assert {step for step, _ in beats} == {0, 1}
    # ... their data preparation too, inside that wall time; the parent keeps the first command and the resume's
    prep = metric_history(uri, parents[0].info.run_id, "prepare_seconds")
    assert {step for step, _ in prep} == {0, 1} and all(v >= 0 for _, v in prep)
    assert "(data preparation " in again.stdout, again.stdout
    tags = parents[0].data.tags
    assert "--resume" not in tags["command"] and tags["command_last"].endswith("--resume"), tags
    assert study_wall_seconds(uri, parents[0].info.run_id) == pytest.approx(
        sum(max(v for s, v in beats if s == step) for step in (0, 1)))
    # Each trial's CPU time: its loop and final evaluation, times its threads (2 here)
    for r in children:
        m = client.get_run(r.info.run_id).data.metrics
        assert m["cpu_seconds"] == pytest.approx(2 * m["trial_wall_seconds"], rel=1e-3) and m["trial_wall_seconds"] > 0


def test_overhead_account_splits_slot_time():
    from harness.study.runner import overhead_account
    # Two slots. A runs 100-110, B 101-111, C 110.5-120; the whole invocation took 22 s.
    runs = [dict(started_at=100, ended_at=110, trial_seconds=10, mlflow_seconds=0.5),
            dict(started_at=101, ended_at=111, trial_seconds=10, mlflow_seconds=0.5),
            dict(started_at=110.5, ended_at=120, trial_seconds=9.5, mlflow_seconds=0.5)]
    cost = overhead_account(runs, 22, 2)
    assert cost["waiting"] == pytest.approx(1.0 + 0.5)       # a slot empty 100-101 and 110-110.5
    assert cost["driver"] == pytest.approx(2.0)              # 22 s wall, trials span 100-120
    assert cost["work"] == pytest.approx(28.0)
    assert cost["overhead_share"] == pytest.approx((1.5 + 1.5 + 2 * 2) / 44)
    assert cost["tail_share"] == pytest.approx(9 / 44)       # B's slot idle 111-120, nothing left to run


def test_provenance_is_the_projects_checkout_not_the_current_directory(tmp_path, monkeypatch):
    """The commit recorded is that of the code that ran, read from the project's checkout: from a scratch
    directory, or from inside another repository, it is still the project's; a harness/ that is not the
    top of a checkout of its own (installed inside someone else's repository) records unknown."""
    from harness.system import PROJECT_ROOT, git_state
    try:
        ours = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("this copy of the project is not a git checkout")
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(["git", "-C", str(other), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "theirs"], check=True)
    monkeypatch.chdir(other)
    assert git_state()[0] == ours
    (other / "vendored" / "harness").mkdir(parents=True)
    assert git_state(other / "vendored") == ("unknown", False)


def test_departures_from_the_paper_are_generated_from_the_study_file():
    from harness.report.header import departure_lines
    from harness.study.departures import departures, departures_tag
    t2 = load_study(ROOT / "studies" / "table2.yaml", "multi30k")
    found = {d["key"]: {(json.dumps(v["ours"]), json.dumps(v["paper"])): v["rows"] for v in d["values"]}
             for d in departures(t2)}
    en_de = ["base", "big", "gnmt", "convs2s"]          # the rivals train on EN-DE
    assert found["model.vocab_size"] == {("8000", "37000"): en_de, ("8000", "32000"): ["base_enfr", "big_enfr"]}
    assert found["train.steps"][("12000", "300000")] == ["big", "big_enfr"]     # big has the base's budget
    assert found["train.patience"] == {("5", "0"): ["base", "big", "base_enfr", "big_enfr", "gnmt", "convs2s"]}
    assert found["data.name"][('"data/multi30k-en-de"', '"data/wmt14-en-de"')] == en_de
    assert "model.p_drop" not in found and "train.log_every" not in found       # as the paper / operational only
    assert found["model.n_layers"] == {("3", "6"): ["base", "big", "base_enfr", "big_enfr"]}   # the Transformers'
    assert found["model.n_enc_layers"] == {("4", "8"): ["gnmt"], ("5", "15"): ["convs2s"]}     # the rivals' own
    assert departures(load_study(ROOT / "studies" / "table2.yaml", "paper")) == []
    rivals = {d["key"]: d for d in departures(load_study(ROOT / "studies" / "table2.yaml", "tiny"))}
    widths = {(v["ours"], v["paper"]): v["rows"] for v in rivals["model.d_model"]["values"]}
    assert widths[(64, 1024)] == ["gnmt"] and widths[(64, 768)] == ["convs2s"]   # a rival's own paper row
    assert {"gnmt", "convs2s"} <= {r for v in rivals["train.lr"]["values"] for r in v["rows"]}
    tiny = {d["key"]: d for d in departures(load_study(ROOT / "studies" / "table3.yaml", "tiny"))}
    shared = tiny["model.share_embeddings"]["values"]
    assert shared == [{"ours": False, "paper": True, "rows": list(shared[0]["rows"])}]
    assert tiny["data.lexicon_scale"]["values"][0]["paper"] is None     # the made-up corpus's own setting
    tag = departures_tag(load_study(ROOT / "studies" / "table3.yaml", "tiny"))["departures"]
    assert len(tag) < 8000 and json.loads(tag)
    lines = departure_lines({"departures": departures_tag(t2)["departures"]}, ",".join(t2.rows))
    assert "- `model.n_layers`: 3 (paper 6) in base, big, base_enfr, big_enfr" in lines     # the rivals have none
    assert "- `train.steps`: 12000 (paper 100000) in base, base_enfr, convs2s; 12000 (paper 300000) in big, " \
        "big_enfr; 12000 (paper 340000) in gnmt" in lines
    assert "- `train.max_tokens`: 2048 (paper 25000)" in lines        # every row: no row list


def test_a_real_data_profile_without_its_data_says_how_to_prepare_it(tmp_path, monkeypatch):
    from harness.study.runner import _check_requirements
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"data prepare multi30k --from DIR --pair en-de --out data/multi30k-en-de"):
        _check_requirements(load_study(ROOT / "studies" / "table2.yaml", "multi30k"))


def test_table4_wsj_sample_profile_parses_the_sample_with_its_departures_listed(tmp_path, monkeypatch):
    from harness.study.departures import departures
    from harness.study.runner import _check_requirements
    t4 = load_study(ROOT / "studies" / "table4.yaml", "wsj-sample")
    assert t4.rows == ["wsj_only"] and len(t4.trials) == 3            # three seeds, for an interval on F1
    assert (t4.trials[0].train.patience, t4.trials[0].train.eval_every, t4.trials[0].train.steps) == (4, 1000, 30000)
    trial = t4.trials[0]
    assert trial.data.name == "data/ptb-wsj-sample" and trial.data.parse_tags is True
    assert trial.model.word_positions is True and trial.model.d_model == 256 and trial.train.average_last == 5
    found = {d["key"]: d["values"] for d in departures(t4)}
    assert found["data.parse_tags"] == [{"ours": True, "paper": False, "rows": ["wsj_only"]}]
    assert found["model.word_positions"][0]["paper"] is False and "model.d_model" in found
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="data prepare ptb --from DIR --out data/ptb-wsj-sample"):
        _check_requirements(t4)


def test_settings_added_later_leave_the_trials_config_hashes_as_they_were():
    # --resume finds a finished trial by its config hash: a new setting at its default (data.target,
    # train.bleu_moses, data.lexicon_seed) must not change the hash of a trial resolved before it existed.
    # (Table 3's tiny base has since taken the agreement measurement, for positions_needed: at its default it is
    # the trial resolved before any of them existed.)
    no_agreement = {"model": {}, "train": {"agreement_sentences": 0}, "data": {}}
    assert load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0], sets=no_agreement).trials[0] \
        .config_hash == "96e5fea09708"
    # Table 2's tiny profile sets two of them (the agreement probe and the BLEU curve): at their defaults the
    # trial is the one resolved before they existed.
    before = {"model": {}, "train": {"agreement_sentences": 0, "curve_bleu_sentences": 0}, "data": {}}
    assert load_study(ROOT / "studies" / "table2.yaml", "tiny", ["base"], [0], sets=before).trials[0].config_hash \
        == "4d3f8f137ad5"
    assert load_study(ROOT / "studies" / "table2.yaml", "tiny", ["base"], [0]).trials[0].config_hash != "4d3f8f137ad5"
    # the recurrent family's attention switch came after the gnmt rows: at its default they keep their hash
    assert load_study(ROOT / "studies" / "table2.yaml", "paper", ["gnmt"], [0]).trials[0].config_hash == "bf72bd975516"
    other = load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0], sets={"model": {}, "train": {},
                                                                                       "data": {"lexicon_seed": 3}})
    assert other.trials[0].config_hash != "96e5fea09708" and other.trials[0].data.lexicon_seed == 3


def test_a_probe_field_added_later_leaves_the_probe_trials_hashes_as_they_were(monkeypatch):
    # A probe row's hash is its spec's fields (harness/trial.hashed_settings), pinned here for the statements
    # store that made reports/statements.md (9b564f0) and for Table 1. A field added to a spec afterwards and
    # declared in its ADDED_LATER is left out while at its default, so --resume still finds those trials.
    import dataclasses

    from harness.probes import statement_spec
    pinned = {("statements", "conv_cost"): "416bef84a4fd", ("table1", "sdpa"): "ab3787ad02fa"}
    for (name, row), digest in pinned.items():
        assert load_study(ROOT / "studies" / f"{name}.yaml", "tiny", [row], [0]).trials[0].config_hash == digest
    trial = load_study(ROOT / "studies" / "statements.yaml", "tiny", ["conv_cost"], [0]).trials[0]
    later = dataclasses.make_dataclass("Later", [("new_knob", int, 7)], bases=(statement_spec.StatementSpec,),
                                       frozen=True)
    grown = dataclasses.replace(trial, probe=later(**dataclasses.asdict(trial.probe)))
    assert grown.config_hash != trial.config_hash            # undeclared, a new field changes every hash
    monkeypatch.setattr(later, "ADDED_LATER", ("new_knob",), raising=False)
    assert grown.config_hash == trial.config_hash
    moved = later(**{**dataclasses.asdict(trial.probe), "new_knob": 8})    # off its default, it counts
    assert dataclasses.replace(grown, probe=moved).config_hash != trial.config_hash


def test_table3_multi30k_profile_runs_every_row_with_three_seeds_until_val_stops_improving():
    t3 = load_study(ROOT / "studies" / "table3.yaml", "multi30k")
    every = set(load_study(ROOT / "studies" / "table3.yaml", "paper").rows)
    # every row of the paper's (Dbase would be the base here), and P0, the row without positions
    assert set(t3.rows) == every | {"P0"} and "Dbase" not in t3.rows
    assert sorted({t.seed for t in t3.trials}) == [0, 1, 2] and len(t3.trials) == 3 * len(t3.rows)
    by = {t.row: t for t in t3.trials if t.seed == 0}
    assert {t.data.name for t in t3.trials} == {"data/multi30k-en-de"}
    assert by["base"].model.d_model == 64 and by["base"].model.n_layers == 3 and by["base"].model.vocab_size == 4000
    assert by["big"].train.steps == by["base"].train.steps == 30000 and by["big"].model.d_model == 128
    assert by["base"].train.average_last == 0 and by["base"].train.lr_scale == 1.0
    assert (by["base"].train.patience, by["base"].train.eval_every) == (5, 500)


def test_a_trial_is_typed_and_becomes_plain_data_only_at_the_ray_boundary():
    """A Trial holds its configs as dataclasses; `to_dict` (what Ray carries) is JSON, and `from_dict` gives the
    same trial back with the same hash. The fields added later are declared on each config class."""
    from harness.data.corpus import DataConfig
    from harness.train import TrainConfig
    from harness.trial import Trial
    from model import TransformerConfig
    for name in ("table3", "table1"):
        for t in load_study(ROOT / "studies" / f"{name}.yaml", "tiny").trials:
            spec = json.loads(json.dumps(t.to_dict()))
            back = Trial.from_dict(spec, KINDS[t.kind].probe_type)
            assert back == t and back.config_hash == t.config_hash, t.key
    t = load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0]).trials[0]
    assert (type(t.model), type(t.train), type(t.data)) == (TransformerConfig, TrainConfig, DataConfig)
    for cls in (TransformerConfig, TrainConfig, DataConfig):
        assert set(cls.ADDED_LATER) <= {f.name for f in dataclasses.fields(cls)}, cls


def test_table2s_rivals_match_the_base_rows_parameters_and_batches_in_the_tiny_profile():
    """Issue: each rival within 10 % of the base row's parameters, on its batches, and trained at least as long
    (each until its dev curve is flat: GNMT the base's steps, ConvS2S 1.5x; docs/calibration.md, round 15)."""
    from harness.study.estimate import parameter_count
    trials = {t.row: t for t in load_study(ROOT / "studies" / "table2.yaml", "tiny").trials}
    base = parameter_count(trials["base"])
    for row, family, optimizer in (("gnmt", "rnn", "adam"), ("convs2s", "conv", "nesterov")):
        t = trials[row]
        assert (t.model.family, t.train.optimizer, t.train.schedule) == (family, optimizer, "constant_decay")
        assert abs(parameter_count(t) / base - 1) <= 0.10, row
        assert t.train.batch_tokens == trials["base"].train.batch_tokens
        assert t.train.steps == {"gnmt": 1, "convs2s": 1.5}[row] * trials["base"].train.steps, row


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_decoder_only_rows_match_the_encoder_decoders_parameters_within_5_percent(profile):
    """Issue: the decoder-only rows at the base's parameter count (within 5 %), 2N layers, the base's d_model."""
    from harness.study.estimate import parameter_count
    trials = {t.row: t for t in load_study(ROOT / "studies" / "decoder_only.yaml", profile, None, [0]).trials}
    base = trials["base"]
    for row in ("prefix", "causal", "causal_srcloss", "redesign"):
        t = trials[row]
        assert t.model.family == "decoder_only" and t.model.n_layers == 2 * base.model.n_enc_layers, row
        assert t.model.d_model == base.model.d_model, row
        assert abs(parameter_count(t) / parameter_count(base) - 1) <= 0.05, row
    assert (trials["causal"].model.lm, trials["causal_srcloss"].model.source_loss) == ("causal", True)


def test_a_measured_dry_run_prints_each_rows_rate_and_share_of_peak(capsys, monkeypatch):
    """`run --dry-run --measure`: each trial's measured target tokens a second and share of the matmul peak, and a
    wall time for as many trials at once as the CPU's cores fit at the profile's cpu a trial (4 cores, 1 each)."""
    import torch
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)        # a CPU machine, wherever this runs
    assert main(["run", str(ROOT / "studies" / "table3.yaml"), "--profile", "tiny", "--rows", "base,C6",
                 "--dry-run", "--measure"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(line for line in out if line.startswith("trial"))
    assert head.split()[-3:] == ["tok/s", "%", "peak"]
    rows = [line.split() for line in out if line.startswith(("base-s0", "C6-s0"))]
    assert len(rows) == 2
    for row in rows:
        tokens_s, share = float(row[-2].replace(",", "")), float(row[-1].rstrip("%"))
        assert 100 < tokens_s < 1e7 and 0 < share < 100
    wall = next(line for line in out if line.startswith("estimated time"))
    assert "on 4 CPU cores, 1 a trial (4 at a time, longest first)" in wall and "% peak:" in wall


def test_a_study_request_from_python_is_what_the_cli_asks_for(tmp_path, capsys):
    """run_study takes a typed request (a notebook builds one; the CLI builds it from its arguments)."""
    from harness.study.runner import StudyRequest, run_study
    study = tmp_path / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")))
    req = StudyRequest(study, rows=("A1",), seeds=(0, 3), sets={"train.steps": 7, "d_model": 64}, dry_run=True)
    assert run_study(req) == 0
    out = capsys.readouterr().out
    assert "2 trials (1 rows, seeds 0,3)" in out
    assert req.parsed_sets() == {"model": {"d_model": 64}, "train": {"steps": 7}, "data": {}, "resources": {}}
    assert req.command_line() == (f"python -m harness run {study} --rows A1 --seeds 0,3 --set train.steps=7 "
                                  "--set d_model=64")
    assert StudyRequest(study, sets=["train.steps=7"]).parsed_sets()["train"] == {"steps": 7}
    with pytest.raises(UserError, match="unknown setting 'train.stepz'"):
        run_study(StudyRequest(study, sets={"train.stepz": 7}, dry_run=True))
    assert main(["run", str(study), "--rows", "A1", "--seeds", "0,3", "--set", "train.steps=7", "--set", "d_model=64",
                 "--dry-run"]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.slow
def test_a_study_runs_from_python_and_lands_in_mlflow(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from harness.study.runner import StudyRequest, run_study
    study = tmp_path / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")))
    uri = new_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert run_study(StudyRequest(study, rows=("base",), runs_dir=tmp_path / "runs", quiet=True)) == 0
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("mini").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("kind") == "study"]
    assert parent.data.tags["command"] == f"python -m harness run {study} --rows base --quiet"
    assert [r.data.tags["row"] for r in runs if r.data.tags.get("kind") == "trial"] == ["base"]


def test_run_set_takes_a_studys_resources_and_train_refuses_them(tmp_path, capsys):
    """`run --set resources.gpu=8` (and workers, cpu): a GPU user need not edit the study file; the trials' hashes
    stay the same (resources are not settings of a trial); `train` has no resources and says so."""
    from harness import overrides
    sets = overrides.parse_sets(["resources.gpu=0.5", "resources.workers=2", "train.steps=7"], overrides.RUN_SECTIONS)
    study = load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0], sets=sets)
    plain = load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0], sets={"train": {"steps": 7}})
    assert study.resources == {"cpu": 1, "gpu": 0.5, "workers": 2}
    assert study.trials[0].config_hash == plain.trials[0].config_hash
    with pytest.raises(UserError, match="resources.workers"):
        load_study(ROOT / "studies" / "table3.yaml", "tiny", ["base"], [0],
                   sets=overrides.parse_sets(["resources.workers=0"], overrides.RUN_SECTIONS))
    assert main(["train", "--set", "resources.gpu=1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "resources.* are a study's" in err and not (tmp_path / "x").exists()


def test_a_smoke_run_measures_with_each_measurements_own_smoke_sizes(tmp_path):
    # extrapolation's rope row takes the length buckets (200 sentences each) and RoPE interpolation (100 steps each
    # way, 4000 pairs, 200 a bucket): its smoke run takes 4 a bucket and 2 steps; a setting at 0 stays off.
    study = load_study(ROOT / "studies" / "extrapolation.yaml", "tiny", seeds=[0])
    rope = next(t for t in study.trials if t.row == "rope")
    small, _ = KINDS["train"].smoke(rope, tmp_path)
    pi, length = small.train.settings_of("rope_pi"), small.train.settings_of("length")
    assert (pi.steps, pi.sentences, pi.per_bucket, pi.factor) == (2, 32, 4, 3.0) and length.sentences == 4
    assert small.train.settings_of("heads").sentences == 0                   # not measured in this row: still off
    assert rope.train.settings_of("rope_pi").steps == 100                   # the trial itself is untouched


def test_hardware_names_the_cpu_model_its_kernels_and_what_caps_them(monkeypatch):
    # Two machines with one name (virtual machines) differ in family and model; an environment variable that caps
    # oneDNN's or MKL's instruction set changes which kernels ran, so the record names it.
    from harness import system
    for key in system._ISA_CAPS:
        monkeypatch.delenv(key, raising=False)
    plain = system.hardware_tags()
    import torch
    assert plain["cpu_isa"].startswith(f"{torch.backends.cpu.get_cpu_capability()} kernels")
    assert "capped" not in plain["cpu_isa"] and plain["cpu_model"] in plain["hardware"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert system.cpu_isa().endswith("; capped by ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=COMPATIBLE")
    assert "capped by ONEDNN_MAX_CPU_ISA=AVX2" in system.hardware()
