"""A study run in slices (`run --slices`), each slice's record written as its trials finish, and one report assembled
from the slices (`report --record DIR/*.slice.json.gz`): equal to one invocation of the same trials apart from its
provenance, each trial once, slices of other settings refused, and a study continued on a machine that lost its store
and run folders, from the records alone."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness import logged, record
from harness.errors import UserError
from harness.report.writers import report_all
from tests.helpers import TWO_ROW_STUDY, invocation_of, new_store

# helpers' two-row study as Table 3 (its claims judge rows base and A1), trained long enough to evaluate on dev
STUDY = (TWO_ROW_STUDY.replace("study: mini", "study: table3")
         .replace("steps: 3, warmup: 2", "steps: 40, warmup: 20, eval_every: 20")
         .replace("checkpoint_every: 0", "checkpoint_every: 20"))


# ------------------------------------------------------------------------------------------ assembly, on its own

def _slice(tmp_path: Path, name: str, trials: list[tuple], started: str, study: str = "table3",
           d_ff: str = "64") -> Path:
    """A slice record of `trials` ((row, seed, hash, dev_ppl)), written as `run --slices` writes one."""
    runs = pd.DataFrame({
        "run_id": [f"{name}{i:030d}" for i in range(len(trials))],
        "status": ["FINISHED"] * len(trials),
        "start_time": pd.Series([pd.Timestamp(started, tz="UTC") + pd.Timedelta(seconds=i) for i in
                                 range(len(trials))], dtype="datetime64[us, UTC]"),
        "metrics.dev_ppl": [t[3] for t in trials],
        "params.model.d_ff": [d_ff] * len(trials),
        "params.train.seed": [str(t[1]) for t in trials],
        "tags.config_hash": [t[2] for t in trials],
        "tags.cpu_model": ["AMD EPYC"] * len(trials),
        "tags.row": [t[0] for t in trials],
        "tags.seed": [str(t[1]) for t in trials],
        "tags.trial_key": [f"{t[0]}-s{t[1]}" for t in trials]})
    parent = {"run_id": f"{name:0<32}", "status": "FINISHED", "start_time": 0,
              "tags": {"profile": "tiny", "study": study, "command": f"python -m harness run s.yaml --name {name}",
                       "git_sha": "ab" * 20, "started": started, "study_rows": "base,A1,C1", "hardware": "x"},
              "params": {"rows": ",".join(dict.fromkeys(t[0] for t in trials))}, "metrics": {"wall_seconds": 60.0}}
    reads = record.Reads(results={"parent": parent, "runs": runs},
                         histories={rid: {"dev_ppl": [[40, ppl]]}
                                    for rid, ppl in zip(runs["run_id"], runs["metrics.dev_ppl"])},
                         complete=list(runs["run_id"]))
    return record.save(tmp_path / f"{name}{record.SLICE_SUFFIX}", reads, study)


def test_slices_assemble_into_one_invocations_trials_in_the_study_files_order(tmp_path):
    a = _slice(tmp_path, "a", [("A1", 0, "h1", 5.0), ("C1", 0, "h3", 6.0)], "2026-12-07T10:00:00")
    b = _slice(tmp_path, "b", [("base", 0, "h0", 4.0)], "2026-12-07T11:00:00")
    rec = logged.record_of(logged.record_uri([b, a]))
    runs, parent = rec.reads.results["runs"], rec.reads.results["parent"]
    assert sorted(runs["tags.trial_key"]) == ["A1-s0", "C1-s0", "base-s0"]
    assert parent["params"]["rows"] == "base,A1,C1" and parent["params"]["seeds"] == "0"    # the study file's order
    slices = json.loads(parent["tags"][record.SLICES_TAG])
    assert [s["trials"] for s in slices] == [["A1-s0", "C1-s0"], ["base-s0"]]                # oldest slice first
    assert parent["study_wall_seconds"] == 120.0 and parent["tags"]["n_trials"] == "3"
    # a slice holds every history of its runs: one never logged reads as none, as a store answers
    assert rec.history(runs["run_id"][0], "train_loss") == []
    assert rec.artifact(runs["run_id"][0], "heads.json") is None


def test_a_trial_two_slices_hold_is_counted_once_and_the_report_says_whose(tmp_path):
    a = _slice(tmp_path, "a", [("base", 0, "h0", 4.0)], "2026-12-07T10:00:00")
    b = _slice(tmp_path, "b", [("base", 0, "h0", 4.5), ("A1", 0, "h1", 5.0)], "2026-12-07T11:00:00")
    rec = logged.record_of(logged.record_uri([b, a]))
    runs = rec.reads.results["runs"]
    assert sorted(runs["tags.trial_key"]) == ["A1-s0", "base-s0"]
    assert float(runs.loc[runs["tags.row"] == "base", "metrics.dev_ppl"].iloc[0]) == 4.0    # the earlier slice's
    dup = json.loads(rec.reads.results["parent"]["tags"]["slice_duplicates"])
    assert dup == [f"base-s0 in b{record.SLICE_SUFFIX} (kept a{record.SLICE_SUFFIX}'s)"]


def test_a_slice_whose_configuration_hashes_differ_is_refused_with_one_sentence(tmp_path):
    a = _slice(tmp_path, "a", [("base", 0, "h0", 4.0)], "2026-12-07T10:00:00")
    b = _slice(tmp_path, "b", [("base", 0, "hX", 4.0)], "2026-12-07T11:00:00")
    with pytest.raises(UserError, match=r"both hold base-s0 under different configuration hashes \(hX against h0\)"):
        logged.record_of(logged.record_uri([a, b]))
    # another seed of the same row, trained under another setting: its settings tell, whatever its hash
    c = _slice(tmp_path, "c", [("base", 1, "h9", 4.0)], "2026-12-07T12:00:00", d_ff="128")
    with pytest.raises(UserError, match=r"trained row base with other settings .*\(model.d_ff 64 against 128\)") as err:
        logged.record_of(logged.record_uri([a, c]))
    assert "\n" not in str(err.value) and str(err.value).count(". ") == 0
    d = _slice(tmp_path, "d", [("base", 1, "h7", 4.0)], "2026-12-07T12:00:00", study="modern")
    with pytest.raises(UserError, match="only the slices of one study, profile and name assemble"):
        logged.record_of(logged.record_uri([a, d]))


def test_report_record_groups_records_by_study_profile_and_name(tmp_path):
    a = _slice(tmp_path, "a", [("base", 0, "h0", 4.0)], "2026-12-07T10:00:00")
    b = _slice(tmp_path, "b", [("A1", 0, "h1", 5.0)], "2026-12-07T11:00:00")
    d = _slice(tmp_path, "d", [("base", 0, "h7", 4.0)], "2026-12-07T12:00:00", study="modern")
    uris = logged.record_uris([a, d, b])
    assert len(uris) == 2 and uris[0].count(record.SEPARATOR) == 1 and record.SEPARATOR not in uris[1]


# ------------------------------------------------------------------------------------------ real slices

def _run(tmp: Path, study: Path, *args: str, uri: str) -> str:
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp / "runs"),
                           "--quiet", *args], cwd=tmp, env={**os.environ, "MLFLOW_TRACKING_URI": uri},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _tables(md: Path) -> list[str]:
    """A report's table lines (its rows, its claims with their verdicts), the one-seed note's wall time aside."""
    return [ln for ln in md.read_text(encoding="utf-8").splitlines() if ln.startswith("|")]


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    """One invocation of rows base and A1, and the same two trials as two slices on two "machines": the first's
    store and run folders deleted before the second continues from the slice records alone."""
    tmp = tmp_path_factory.mktemp("slices")
    study = tmp / "t3.yaml"
    study.write_text(STUDY.replace("CACHE", str(tmp / "cache")))
    one = _run(tmp, study, "--rows", "base,A1", "--slices", str(tmp / "one"), uri=new_store(tmp, "one.db"))
    first = _run(tmp, study, "--rows", "base", "--slices", str(tmp / "two"), uri=new_store(tmp, "a.db"))
    (tmp / "a.db").unlink()                             # the machine is lost: its store and checkpoints with it
    shutil.rmtree(tmp / "runs")
    second = _run(tmp, study, "--rows", "base,A1", "--slices", str(tmp / "two"), uri=new_store(tmp, "b.db"))
    return tmp, {"one": one, "first": first, "second": second}


@pytest.mark.slow
def test_a_finished_trial_leaves_its_slice_record_at_once(slices):
    tmp, out = slices
    made = sorted((tmp / "two").glob(f"*{record.SLICE_SUFFIX}"))
    assert len(made) == 2
    assert re.search(r"base-s0: dev PPL .*\n  slice record: .*\.slice\.json\.gz", out["first"])   # after the trial
    body = record.load(made[0])
    assert list(body.reads.results["runs"]["tags.trial_key"]) == ["base-s0"]
    rid = body.reads.results["runs"]["run_id"][0]
    assert {"dev_ppl", "train_loss"} <= set(body.reads.histories[rid]) and rid in body.reads.complete


@pytest.mark.slow
def test_a_record_that_holds_a_trial_makes_run_skip_it_after_the_store_was_lost(slices):
    tmp, out = slices
    assert "1 of 2 trials already held by the slice records" in out["second"] and "(skipped: base-s0)" in out["second"]
    assert "A1-s0: dev PPL" in out["second"] and "base-s0: dev PPL" not in out["second"]
    status = subprocess.run([sys.executable, "-m", "harness", "status", str(tmp / "t3.yaml")], cwd=tmp,
                            env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'b.db'}"}, capture_output=True,
                            text=True, timeout=300)
    assert "1 trial: 1 finished" in status.stdout and "held by other slices' records" in status.stdout, status.stdout
    again = _run(tmp, tmp / "t3.yaml", "--rows", "base,A1", "--slices", str(tmp / "two"),
                 uri=new_store(tmp, "c.db"))
    assert "2 of 2 trials already held" in again and "nothing to run" in again and "MLflow run" not in again


@pytest.mark.slow
def test_two_slices_assembled_equal_one_invocation_of_the_same_trials(slices):
    tmp, _ = slices
    one = report_all(tmp / "rep-one", logged.record_uri(sorted((tmp / "one").glob("*.slice.json.gz"))),
                     publish=False)
    two = report_all(tmp / "rep-two", logged.record_uri(sorted((tmp / "two").glob("*.slice.json.gz"))),
                     publish=False)
    md1, md2 = tmp / "rep-one" / "table3.md", tmp / "rep-two" / "table3.md"
    assert md1 in one and md2 in two
    assert (tmp / "rep-one" / "table3.csv").read_bytes() == (tmp / "rep-two" / "table3.csv").read_bytes()
    tables = _tables(md2)
    assert tables == _tables(md1) and any(ln.startswith("| `") for ln in tables)     # rows, claims and verdicts
    text = md2.read_text(encoding="utf-8")
    assert text.count("\n- slice ") == 2 and "trials: base-s0" in text and "trials: A1-s0" in text
    assert "nothing in model/, harness/train/ and harness/data/ differs" in text
    # the freshness test reads the slices' commands together, and the rows their trials hold
    path, profile, rows, sets = invocation_of(text)
    assert path.endswith("t3.yaml") and profile == "tiny" and rows == ["base", "A1"] and not any(sets.values())
    # and the assembled report regenerates from its own record, byte for byte
    again = report_all(tmp / "rep-again", logged.record_uri(tmp / "rep-two" / "table3.record.json.gz"),
                       publish=False)
    assert all(p.read_bytes() == (tmp / "rep-two" / p.relative_to(tmp / "rep-again")).read_bytes()
               for p in again if p.name != "README.md" and p.suffix != ".png")


def test_an_assembled_report_gives_the_command_that_trains_each_trial_again():
    from harness.report.slices import one_trial_command, reproduce_lines
    cmd = ("python -m harness run studies/transformer_tiny.yaml --profile multi30k --seeds 0,1,2 --slices --resume "
           "--quiet")
    assert one_trial_command(cmd, "tiny", "2") == \
        "python -m harness run studies/transformer_tiny.yaml --profile multi30k --rows tiny --seeds 2"
    assert one_trial_command("python -m harness run s.yaml --slices /x/y --rows a,b", "b", "0") == \
        "python -m harness run s.yaml --rows b --seeds 0"
    slices = [{"command": cmd, "trials": ["tiny-s1"]}, {"command": cmd, "trials": ["tiny-s0", "tiny-s2"]}]
    line, = reproduce_lines(slices)
    assert line.count("`python -m harness run") == 3 and "tiny-s2: `python -m harness run" in line
    many = [{"command": cmd, "trials": [f"r{i}-s0" for i in range(7)]}]
    assert "--rows ROW --seeds SEED" in reproduce_lines(many)[0]
