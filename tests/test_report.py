"""harness.report on fake studies logged into a throwaway sqlite MLflow store with the runner's schema."""

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from harness import logged, record
from harness.cli import main
from harness.errors import UserError
from harness.paper import load_tables
from harness.report.writers import report_all, write_report
from tests.helpers import assert_titled_by_study, new_store, record_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SHA = "0123abcd4567ef"
COMMAND = "python -m harness run studies/table3.yaml --profile tiny"
BASE = {"model.n_layers": 3, "model.d_model": 128, "model.d_ff": 512, "model.n_heads": 8, "model.d_k": 16,
        "model.d_v": 16, "model.p_drop": 0.1, "model.positional": "sinusoid", "model.norm_position": "post",
        "train.label_smoothing": 0.1, "train.steps": 150, "train.average_last": 5, "data.name": "synth"}
# (row, seed, status, model/train overrides, dev_ppl, dev_bleu, dev_bleu_tok, failure_reason), logged out of the
# paper's order on purpose. C4's third seed was KILLED with absurd numbers: it must not enter the means.
TABLE3 = [
    ("C4", 0, "FINISHED", {"model.d_model": 64, "model.d_k": 8, "model.d_v": 8}, 15.0, 10.0, 11.0, None),
    ("C4", 1, "FINISHED", {"model.d_model": 64, "model.d_k": 8, "model.d_v": 8}, 16.0, 9.0, 10.0, None),
    ("C4", 2, "KILLED", {"model.d_model": 64, "model.d_k": 8, "model.d_v": 8}, 999.0, 0.0, 0.0, None),
    ("base", 0, "FINISHED", {}, 10.0, 20.0, 21.0, None),
    ("base", 1, "FINISHED", {}, 12.0, 22.0, 24.0, None),
    ("D1", 0, "FAILED", {"model.p_drop": 0.0}, None, None, None, "CUDA out of memory at step 5"),
    ("D1", 1, "FAILED", {"model.p_drop": 0.0}, None, None, None, "CUDA out of memory at step 5"),
    ("A1", 0, "FINISHED", {"model.n_heads": 1, "model.d_k": 128, "model.d_v": 128}, 13.0, 18.0, 19.0, None),
    ("A1", 1, "FINISHED", {"model.n_heads": 1, "model.d_k": 128, "model.d_v": 128}, 14.0, 17.0, 18.0, None),
]
MODERN = [
    ("base", 0, "FINISHED", {}, 10.0, 20.0, 21.0, None),
    ("F2", 0, "FINISHED", {"model.ffn": "swiglu"}, 9.0, 21.0, 22.0, None),
    ("F1", 0, "FINISHED", {"model.norm_position": "pre"}, 9.5, 20.5, 21.5, None),
]


def log_study(client: MlflowClient, study: str, trials: list, rows: str, variant: str = "",
              t0: int = 1_700_000_000_000) -> str:
    db = Path(client.tracking_uri[len("sqlite:///"):])
    found = client.get_experiment_by_name(study)
    exp = found.experiment_id if found else client.create_experiment(
        study, artifact_location=(db.parent / "mlruns").as_uri())
    common = {"study": study, "version": "1", "profile": "tiny", "git_sha": SHA, "git_dirty": "True",
              "hardware": "2 CPU cores (test)", "version.torch": "9.9.9", "version.ray": "8.8.8"}
    parent = client.create_run(exp, start_time=t0, tags={
        **common, "kind": "study", "command": COMMAND.replace("table3", study), "started": "2025-01-02T03:04:05",
        "run_dir": "/tmp/runs/x", **({"variant": variant} if variant else {})}).info.run_id
    client.log_batch(parent, params=[Param("rows", rows), Param("seeds", "0,1")])
    for i, (row, seed, status, over, ppl, bleu, bleu_tok, reason) in enumerate(trials):
        tags = {**common, "kind": "trial", "mlflow.parentRunId": parent, "row": row, "seed": str(seed),
                "config_hash": f"h{row}", "trial_key": f"{row}-s{seed}", "sacrebleu_signature": "nrefs:1|tok:13a"}
        if reason:
            tags["failure_reason"] = reason
        run = client.create_run(exp, start_time=t0 + 1000 * (i + 1), tags=tags).info.run_id
        params = {**BASE, **over, "train.seed": seed}
        client.log_batch(run, params=[Param(k, str(v)) for k, v in params.items()])
        last = 30 if ppl is not None else 10          # a failed trial dies early, without final metrics
        metrics = [Metric("train_loss", 8.0 - step / 10 - seed / 10, 0, step) for step in range(10, last + 1, 10)]
        if ppl is not None:
            finals = {"dev_ppl": ppl, "dev_bleu": bleu, "dev_bleu_tok": bleu_tok,
                      "params": 1.5e6 * params["model.d_model"] / 128, "steps": last}
            metrics += [Metric(k, v, 0, last) for k, v in finals.items()]
        client.log_batch(run, metrics=metrics)
        client.set_terminated(run, status)
    client.log_batch(parent, metrics=[Metric("wall_seconds", 321.0, 0, 0), Metric("overhead_share", 0.125, 0, 0)])
    failed = sum(t[2] == "FAILED" for t in trials)
    client.log_batch(parent, tags=[RunTag("n_trials", str(len(trials))), RunTag("n_failed", str(failed))])
    client.set_terminated(parent, "FAILED" if failed else "FINISHED")
    return parent


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module (creating a sqlite schema takes seconds), written to by report tests
    in their own out_dir."""
    uri = new_store(tmp_path_factory.mktemp('mlflow'))
    client = MlflowClient(uri)
    ids = {"table3": log_study(client, "table3", TABLE3, "base,A1,C4,D1"),
           "modern": log_study(client, "modern", MODERN, "base,F1,F2")}
    return uri, ids


@pytest.fixture(scope="module")
def table3(store, tmp_path_factory):
    uri, ids = store
    out = tmp_path_factory.mktemp("reports")
    paths = write_report("table3", out, uri)
    return out, paths, pd.read_csv(out / "table3.csv").set_index("row", drop=False), ids["table3"]


def test_files_written(table3):
    out, paths, _, _ = table3
    names = {p.name for p in paths}
    assert names == {"table3.md", "table3.csv", "table3_learning_curves.png", "table3_bleu_vs_params.png",
                     "table3_knobs.png", "table3.record.json.gz", "README.md"}
    assert all(p.parent == out and p.stat().st_size > 0 for p in paths)
    assert not list(out.glob(".*.tmp"))      # atomic writes leave no temp files behind


def test_the_report_is_published_on_the_parent_run(table3, store):
    """The MLflow UI shows the report: the parent's description is its Markdown (cut to what a tag holds),
    its files are artifacts under report/, its table an MLflow table; a second `report` replaces them."""
    out, _, df, parent = table3
    uri, _ = store
    client = MlflowClient(uri)
    run = client.get_run(parent)
    note = run.data.tags["mlflow.note.content"]
    md = (out / "table3.md").read_text(encoding="utf-8")
    assert note.splitlines()[0] == md.splitlines()[0] and len(note) <= 8000
    assert note == md or "the rest is in the artifact report/table3.md" in note
    names = {a.path for a in client.list_artifacts(parent, "report")}
    assert {"report/table3.md", "report/table3.csv", "report/table3_knobs.png", "report/table.json"} <= names
    table = json.loads(Path(client.download_artifacts(parent, "report/table.json", str(out / "dl"))).read_text())
    assert sorted(r[table["columns"].index("row")] for r in table["data"]) == sorted(df["row"])
    write_report("table3", out, uri)                     # again: the same artifacts, replaced, not added
    assert {a.path for a in client.list_artifacts(parent, "report")} == names


def test_rows_in_paper_order_with_hand_computed_means(table3):
    _, _, csv, _ = table3
    assert csv["row"].tolist() == ["base", "A1", "C4", "D1"]
    assert csv.loc["base", "ppl_mean"] == pytest.approx(11.0)
    assert csv.loc["base", "ppl_std"] == pytest.approx(math.sqrt(2), abs=1e-4)      # sample std of 10, 12
    assert csv.loc["base", "bleu_tok_mean"] == pytest.approx(22.5)
    assert csv.loc["base", "bleu_tok_std"] == pytest.approx(math.sqrt(4.5), abs=1e-4)
    assert csv.loc["A1", "bleu_mean"] == pytest.approx(17.5)
    assert csv.loc["A1", "delta_ppl"] == pytest.approx(13.5 - 11.0)
    assert csv.loc["A1", "delta_bleu_tok"] == pytest.approx(18.5 - 22.5)
    # The values actually run, from the params (strings in MLflow), not the paper's.
    assert csv.loc["A1", ["N", "d_model", "h", "d_k", "d_v"]].tolist() == [3, 128, 1, 128, 128]
    assert csv.loc["C4", "d_model"] == 64 and csv.loc["D1", "P_drop"] == 0.0 and csv.loc["base", "steps"] == 150
    assert csv.loc["C4", "params_M"] == pytest.approx(0.75)


def test_intervals_and_seed_paired_deltas(table3):
    out, _, csv, _ = table3
    # base: 10 and 12, so sd sqrt(2) and the 95 % half-width t(0.975, 1) * sqrt(2) / sqrt(2) = 12.706
    assert csv.loc["base", "ppl_ci"] == pytest.approx(12.706, abs=1e-3)
    # A1 - base by seed: 3 and 2; their half-width 12.706 * sd(3, 2) / sqrt(2) = 12.706 / 2
    assert csv.loc["A1", "delta_ppl_ci"] == pytest.approx(12.706 / 2, abs=1e-3)
    md = (out / "table3.md").read_text()
    assert "+2.50 ± 6.35" in md and "11.00 ± 12.71" in md


def test_claims_section_is_computed_from_the_runs(table3):
    out, _, _, _ = table3
    md = (out / "table3.md").read_text()
    claims = md[md.index("## Claims"):]
    line = next(ln for ln in claims.splitlines() if ln.startswith("| `single_head_worse`"))
    # best of base/A2/A3/A4 is base (the only one run); ln PPL: (ln 13 - ln 10 + ln 14 - ln 12) / 2
    assert f"{(math.log(13 / 10) + math.log(14 / 12)) / 2:+.3f}" in line and "n=2" in line
    assert "**inconclusive**" in line and "within the seed-to-seed spread" in line
    assert "**not run**" in next(ln for ln in claims.splitlines() if ln.startswith("| `dropout_helps`"))   # D1 failed


def test_unfinished_seeds_are_not_averaged(table3):
    _, _, csv, _ = table3
    c4 = csv.loc["C4"]
    assert (c4["n_seeds"], c4["n_finished"], c4["status"]) == (3, 2, "PARTIAL")
    assert c4["ppl_mean"] == pytest.approx(15.5) and c4["bleu_mean"] == pytest.approx(9.5)


def test_paper_values_beside_ours(table3):
    _, _, csv, _ = table3
    paper = load_tables()["table3"]["rows"]
    for row in ("base", "A1", "C4", "D1"):
        assert csv.loc[row, "paper_ppl"] == pytest.approx(paper[row]["ppl"])
        assert csv.loc[row, "paper_bleu"] == pytest.approx(paper[row]["bleu"])
        assert csv.loc[row, "paper_delta_bleu"] == pytest.approx(paper[row]["bleu"] - paper["base"]["bleu"])
    assert csv.loc["C4", "paper_params_M"] == pytest.approx(paper["C4"]["params"])
    assert pd.isna(csv.loc["A1", "paper_params_M"]) == (paper["A1"]["params"] is None)


def test_failed_row_kept_with_reason(table3):
    out, _, csv, _ = table3
    d1 = csv.loc["D1"]
    assert d1["status"] == "FAILED" and d1["n_finished"] == 0 and pd.isna(d1["ppl_mean"])
    assert d1["failure_reason"] == "CUDA out of memory at step 5"        # once, though both seeds failed
    line = next(ln for ln in (out / "table3.md").read_text().splitlines() if ln.startswith("| **D1**"))
    assert "0/2 FAILED" in line and "CUDA out of memory at step 5" in line


def test_pngs_are_valid_images(table3):
    out, _, _, _ = table3
    for kind in ("learning_curves", "bleu_vs_params", "knobs"):
        path = out / f"table3_{kind}.png"
        assert path.read_bytes()[:8] == PNG_MAGIC
        height, width = imread(path).shape[:2]
        assert height > 100 and width > 100


def test_markdown_provenance_and_index(table3):
    out, _, _, parent_id = table3
    md = (out / "table3.md").read_text()
    head = md.split("| row |")[0]                      # everything above the table
    assert COMMAND in head and SHA in head and "dirty" in head and parent_id in head
    assert "tiny" in head and "2 CPU cores (test)" in head and "2025-01-02T03:04:05" in head
    assert "321 s" in head and "12.5 %" in head
    assert "versions: ray 8.8.8, torch 9.9.9; trials trained on 2 CPU cores (test)" in head
    assert "harness/paper/tables.yaml" in head and load_tables()["table3"]["metrics"]["bleu"] in head
    assert "made-up corpus" in head
    # The paper's caption says "no checkpoint averaging"; the report says that these rows were averaged.
    assert "no checkpoint averaging" in head and "mean of its last 5 checkpoints" in head
    # beside the paper's caption, what ran
    assert "Ours: profile `tiny`, the made-up corpus, a fixed number of steps, the mean of the last 5 checkpoints." \
        in head
    paper_base_bleu = f"{load_tables()['table3']['rows']['base']['bleu']:.1f}"
    assert f"| {paper_base_bleu} |" in next(ln for ln in md.splitlines() if ln.startswith("| **base**"))
    index = (out / "README.md").read_text()
    assert "[table3](table3.md)" in index and COMMAND in index and SHA in index
    assert "5.3 min wall · " in index                   # the 321 s of the provenance, for the index reader


def test_the_index_gives_each_report_its_cost():
    """The index line of a report gives the wall time of every invocation that made it, the trials'
    CPU-hours and how many trials the patience rule stopped, read from the report's own provenance lines."""
    from harness.report.writers import _cost
    resumed = ("- wall time 2.69 h over 4 invocations (the last 2032 s), Ray + MLflow overhead\n"
               "- CPU time of the trials: 4.82 CPU-hours (each trial's wall time, across its interruptions)\n")
    assert _cost(resumed) == "2.69 h wall over 4 invocations, 4.82 CPU-hours · "
    ruled = resumed + ("- the patience rule stopped 57 of the 60 finished trials that trained under it (95 %); 3 "
                       "hit the step budget; it stopped every seed of 18 of 20 rows\n")
    assert _cost(ruled) == "2.69 h wall over 4 invocations, 4.82 CPU-hours, 57 of 60 stopped by the patience rule · "
    one = "- the patience rule stopped 1 of the 1 finished trial that trained under it (100 %)"
    assert _cost(one) == "1 of 1 stopped by the patience rule · "
    assert _cost("- wall time 5521 s, Ray + MLflow overhead share 0.4 %") == "1.53 h wall · "
    assert _cost("- wall time 1565 s, Ray") == "26.1 min wall · " and _cost("no provenance") == ""
    assert _cost("- wall time 1565 s (data preparation 12 s), Ray") == "26.1 min wall · "


def test_the_index_headline_counts_in_the_singular_and_the_plural():
    from harness.report.evidence import Evidence
    from harness.report.writers import _headline
    one = Evidence(verdicts={"a": "inconclusive"}, seeds={"base": 1})
    assert _headline(one) == "**1 claim: 1 inconclusive; 1 row, 1 finished seed a row** · "
    two = Evidence(verdicts={"a": "holds", "b": "not run"}, seeds={"base": 3, "big": 2})
    assert _headline(two) == "**2 claims: 1 hold, 1 not run; 2 rows, 2 to 3 finished seeds a row** · "


def test_other_study_rows_in_declared_order_without_paper_columns(store, tmp_path):
    uri, _ = store
    paths = report_all(tmp_path, uri, studies=["table3", "modern", "never_run"])   # never_run: skipped
    csv = pd.read_csv(tmp_path / "modern.csv").set_index("row", drop=False)
    assert csv["row"].tolist() == ["base", "F1", "F2"]
    assert not any(c.startswith("paper_") for c in csv.columns)
    assert csv.loc["F1", "changes"] == "norm_position=pre" and csv.loc["F2", "changes"] == "ffn=swiglu"
    # no paper table: the rows layout (harness/report/rows.py), every change against the base in the last column
    assert (tmp_path / "modern_rows.png").read_bytes()[:8] == PNG_MAGIC and not (tmp_path / "modern_knobs.png").exists()
    md = (tmp_path / "modern.md").read_text()
    assert md.startswith("# modern: today's replacements (RoPE, pre-norm")      # what the study asks, as its title
    assert "| row | seeds | dev PPL | BLEU sacre | BLEU tok |" in md and "paper PPL" not in md
    assert "norm_position=pre" in next(ln for ln in md.splitlines() if ln.startswith("| **F1**"))
    index = (tmp_path / "README.md").read_text()
    assert "[modern](modern.md)" in index and "[table3](table3.md)" in index
    assert sum(p.name == "README.md" for p in paths) == 1


def test_a_named_invocation_is_reported_apart_and_never_replaces_the_profiles_own(tmp_path, monkeypatch):
    """`run --name corpus2` (a --set variant of the tiny profile), run after the unnamed invocation: `report`
    writes reports/corpus2/table3.md from it and keeps reports/table3.md on the unnamed one; `report --name`
    writes only the named one; an unknown name is a UserError naming it."""
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    log_study(client, "table3", TABLE3, "base,A1,C4,D1")
    other = [(r, s, st, o, None if p is None else p * 2, b, bt, why) for r, s, st, o, p, b, bt, why in TABLE3]
    log_study(client, "table3", other, "base,A1,C4,D1", variant="corpus2", t0=1_800_000_000_000)
    out = tmp_path / "reports"
    paths = report_all(out, uri, studies=["table3"])
    assert out / "table3.md" in paths and out / "corpus2" / "table3.md" in paths
    main = pd.read_csv(out / "table3.csv").set_index("row")
    named = pd.read_csv(out / "corpus2" / "table3.csv").set_index("row")
    assert main.loc["base", "ppl_mean"] == pytest.approx(11.0) and named.loc["base", "ppl_mean"] == pytest.approx(22.0)
    assert "[table3 (corpus2)](corpus2/table3.md)" in (out / "README.md").read_text()
    drawn = record_figures(monkeypatch)
    only = report_all(tmp_path / "only", uri, studies=["table3"], variant="corpus2")
    assert not (tmp_path / "only" / "table3.md").exists() and (tmp_path / "only" / "corpus2" / "table3.md") in only
    titles = {name: fig.get_suptitle() or fig.axes[0].get_title() for name, fig in drawn}
    assert titles and all(t.startswith("table3 corpus2 (tiny profile)") for t in titles.values()), titles
    with pytest.raises(UserError, match="named corpus3"):
        write_report("table3", tmp_path / "none", uri, variant="corpus3")


def test_unknown_study_or_profile_is_a_user_error(store, tmp_path):
    uri, _ = store
    with pytest.raises(UserError, match=r"no runs of study table9 in .*python -m harness run studies/table9.yaml"):
        write_report("table9", tmp_path, uri)
    with pytest.raises(UserError, match="with profile paper"):
        write_report("table3", tmp_path, uri, profile="paper")
    assert not list(tmp_path.iterdir())               # nothing half-written


@pytest.mark.parametrize("where", ["garbage file", "no server"])
def test_unreachable_store_is_a_user_error(tmp_path, monkeypatch, where):
    if where == "garbage file":
        (tmp_path / "mlflow.db").write_text("not a database\n")
        uri = f"sqlite:///{tmp_path}/mlflow.db"
    else:   # nothing listens on port 9 (discard); no retries, so this fails at once
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        uri = "http://127.0.0.1:9"
    with pytest.raises(UserError, match="cannot read the MLflow tracking store") as err:
        write_report("table3", tmp_path / "out", uri)
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_the_convergence_check_reads_the_last_weights_not_their_average(tmp_path):
    """Averaged, a row's final dev PPL is its checkpoints' mean; whether training still improved is read from
    the curve ending in the last weights' own dev PPL (dev_ppl_last), so averaging's gain is not mistaken
    for a run stopped early."""
    from harness.report.stopping import row_diagnostics
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp = client.create_experiment("t", artifact_location=(tmp_path / "mlruns").as_uri())
    curve = [(10, 3.0), (20, 2.5), (30, 2.0), (40, 1.5)]          # 40: the averaged checkpoints
    for row, live in (("base", 1.98), ("C1", None)):
        run = client.create_run(exp, tags={"row": row}).info.run_id
        metrics = [Metric("dev_ppl", v, 0, step) for step, v in curve]
        if live is not None:
            metrics.append(Metric("dev_ppl_last", live, 0, 40))
        client.log_batch(run, metrics=metrics)
        client.set_terminated(run, "FINISHED")
    import mlflow
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs([exp])
    finally:
        mlflow.set_tracking_uri(before)
    diag = row_diagnostics(runs, uri)
    assert diag["base"]["drop"] == pytest.approx(1 - 1.98 / 2.0) and diag["base"]["ppl"] == pytest.approx(1.5)
    assert diag["C1"]["drop"] == pytest.approx(1 - 1.5 / 2.0)      # no last-weights figure: the curve as logged
    assert diag["base"]["span"] == (30, 40)


def test_report_does_not_replace_another_invocations_report_without_being_asked(tmp_path, capsys):
    """A newcomer's one-seed run must not replace the committed three-seed reference without a word: `report`
    stops in one sentence and writes nothing; --out elsewhere or --replace write it."""
    from harness.cli import main
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    log_study(client, "table3", TABLE3, "base,A1,C4,D1")
    out = tmp_path / "reports"
    report_all(out, uri, studies=["table3", "modern"])
    first = (out / "table3.md").read_text()
    report_all(out, uri, studies=["table3"])                     # the same invocation again: written over
    log_study(client, "table3", TABLE3, "base,A1,C4,D1", t0=1_900_000_000_000)     # a newer invocation
    import os
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        code = main(["report", "--study", "table3", "--out", str(out)])
        said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]   # MLflow logs aside
        assert code == 2 and len(said) == 1 and "was made from another invocation" in said[0] and "--replace" in said[0]
        assert (out / "table3.md").read_text() == first           # nothing written
        assert main(["report", "--study", "table3", "--out", str(out), "--replace"]) == 0
        assert (out / "table3.md").read_text() != first
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]


def test_report_refuses_to_replace_a_fuller_report_and_says_what_changed(tmp_path, capsys):
    """A newer invocation with one seed a row and a row fewer: even with --replace, `report` refuses in one sentence
    naming --force and writes nothing; --force writes it and says what it lost; a fuller one says what it gained."""
    from harness.cli import main
    from harness.report.evidence import read_evidence
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    log_study(client, "table3", TABLE3, "base,A1,C4,D1")
    out = tmp_path / "reports"
    report_all(out, uri, studies=["table3"])
    first = (out / "table3.md").read_text()
    assert read_evidence(first).seeds == {"base": 2, "A1": 2, "C4": 2, "D1": 0}
    fewer = [t for t in TABLE3 if t[1] == 0 and t[0] != "A1"]
    log_study(client, "table3", fewer, "base,C4,D1", t0=1_900_000_000_000)
    import os
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        # with --replace, and without it (the fuller report is then also another invocation's): the same sentence
        for flags in (["--replace"], []):
            code = main(["report", "--study", "table3", "--out", str(out), *flags])
            said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
            assert code == 2 and len(said) == 1 and "--force" in said[0] and "rests on 9 trials" in said[0]
            assert "would change trials 9 -> 3; rows lost: A1; finished seeds: C4 2 -> 1, base 2 -> 1" in said[0]
        assert (out / "table3.md").read_text() == first           # nothing written
        assert main(["report", "--study", "table3", "--out", str(out), "--force"]) == 0
        told = capsys.readouterr().out
        assert "rows lost: A1" in told and "finished seeds: base 2 -> 1" in told and "trials 9 -> 3" in told
        log_study(client, "table3", TABLE3, "base,A1,C4,D1", t0=2_000_000_000_000)      # three seeds again
        assert main(["report", "--study", "table3", "--out", str(out), "--replace"]) == 0
        assert "rows gained: A1" in capsys.readouterr().out
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]


def test_a_one_seed_report_says_which_claims_point_the_papers_way_and_how_to_get_verdicts(store, tmp_path):
    uri, _ = store
    report_all(tmp_path, uri, studies=["modern"])
    head = (tmp_path / "modern.md").read_text().split("## Claims", 1)[1].split("| claim |")[0]
    # rope_better (F1 vs base) and prenorm_better_small (F2 vs base) ran with one seed: lower PPL is the paper's way,
    # and both rows' PPL (9.5, 9.0) lies below the base's (10.0) in this store
    assert "2 claims rest on one seed, which gives no interval: 2 of 2 point the paper's way" in head
    assert "`python -m harness run studies/modern.yaml --profile tiny --seeds 0,1,2`" in head
    assert "about three times this study's 5 minutes" in head


def test_the_one_seed_note_times_three_seeds_from_the_whole_study_not_its_last_resume():
    # transformer_tiny ran 2.69 h over four invocations, the last 34 minutes: three seeds cost about three times
    # the 2.69 h (minus the data preparation, done once), not three times the last resume's 34 minutes
    from harness.report.claims_section import one_seed_note
    checked = [{"verdict": "inconclusive", "n": 1, "diff": -0.16,
                "claim": type("C", (), {"expect": "value", "margin": 0.0})()}]
    parent = {"status": "FINISHED", "tags": {"command": "python -m harness run studies/transformer_tiny.yaml"},
              "metrics": {"wall_seconds": 2032.0, "prepare_seconds": 60.0}, "study_wall_seconds": 9684.0}
    note = one_seed_note(checked, parent)
    assert "about three times this study's 160 minutes" in note and "0 of 1 point the paper's way" in note
    assert note.startswith(" 1 claim rests on one seed")
    del parent["study_wall_seconds"]                    # a store from before invocations were timed
    assert "about three times this study's 33 minutes" in one_seed_note(checked, parent)


def test_a_plot_the_new_report_does_not_draw_is_removed_with_it(tmp_path):
    # The report it replaces showed s_knobs.png; this one draws no such plot (it would carry no information), so
    # the file goes; a PNG no report of this study showed is not touched.
    import pandas as pd

    from harness.report.files import install_files, write_files
    out, made = tmp_path / "reports", tmp_path / "made"
    out.mkdir()
    made.mkdir()
    for name in ("s_knobs.png", "s_curves.png", "other.png"):
        (out / name).write_bytes(b"old png")
    (out / "s.md").write_text("# s\n\n![s_knobs](s_knobs.png)\n![s_curves](s_curves.png)\n", encoding="utf-8")
    table = pd.DataFrame({"row": ["base"]})
    (made / "s_curves.png").write_bytes(b"new png")
    (made / "s_figure.png").write_bytes(b"figure")
    # a section's own image (shown in its lines, not in the plots list) stays: it is shown
    files = write_files("s", made, ["# s", "![s_figure](s_figure.png)"], table, [made / "s_curves.png", None])
    placed = install_files("s", [*files, made / "s_figure.png"], out)
    assert [p.name for p in placed] == ["s.md", "s.csv", "s_curves.png", "s_figure.png"]
    assert all(p.parent == out for p in placed)
    assert {p.name for p in out.glob("*.png")} == {"s_curves.png", "s_figure.png", "other.png"}
    assert (out / "s_curves.png").read_bytes() == b"new png" and not list(out.glob(".*.tmp"))
    assert "![s_curves](s_curves.png)" in (out / "s.md").read_text()


def test_the_knobs_plot_is_titled_by_its_study_and_profile_not_by_its_last_panel(tmp_path, monkeypatch):
    import harness.report.table3 as t3
    figs = []
    monkeypatch.setattr(t3, "save_png", lambda fig, path: figs.append(fig) or path)
    table = pd.DataFrame({"row": ["base", "C4", "C5", "D3", "D4"], "status": ["FINISHED"] * 5,
                          "d_model": [64, 32, 128, 64, 64], "eps_ls": [0.1, 0.1, 0.1, 0.0, 0.2],
                          "bleu_tok_mean": [30.0, 25.0, 32.0, 29.0, 29.5], "bleu_tok_std": [0.5] * 5,
                          "ppl_mean": [6.0, 7.5, 5.5, 5.8, 6.3], "ppl_std": [0.1] * 5})
    t3.plot_knobs("table3", table, tmp_path / "knobs.png", "table3 (multi30k profile)")
    fig = figs[0]
    assert fig._suptitle.get_text().startswith("table3 (multi30k profile): one knob at a time")
    assert {ax.get_title() for ax in fig.axes} >= {"width (C4, C5)", "label smoothing (D3, D4)"}   # each panel's


def test_every_table3_and_rows_plot_is_titled_by_its_study(store, tmp_path, monkeypatch):
    uri, ids = store
    drawn = record_figures(monkeypatch)
    for study in ids:
        write_report(study, tmp_path, uri)
    assert {name for name, _ in drawn} >= {"table3_knobs.png", "modern_rows.png"}
    assert_titled_by_study(drawn, list(ids))


def test_report_check_compares_a_regenerated_report_with_the_committed_one_and_writes_nothing(store, tmp_path,
                                                                                             capsys, monkeypatch):
    from harness.cli import main
    uri, ids = store
    out = tmp_path / "reports"
    report_all(out, uri, studies=["table3"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    published = {a.path for a in client.list_artifacts(ids["table3"], "report")}
    assert main(["report", "--study", "table3", "--out", str(out), "--check"]) == 0
    assert "every report regenerated agrees with" in capsys.readouterr().out
    md = out / "table3.md"
    lines = md.read_text(encoding="utf-8").splitlines()
    md.write_text("\n".join([*lines[:5], "a line edited by hand", *lines[6:]]) + "\n", encoding="utf-8")
    (out / "table3_knobs.png").unlink()
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert main(["report", "--study", "table3", "--out", str(out), "--check"]) == 1
    said = capsys.readouterr().out
    assert f"{md}: differs from line 6 ({len(lines)} lines there, {len(lines)} regenerated)" in said
    assert f"{out / 'table3_knobs.png'}: absent" in said and "2 file(s) under" in said
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before          # nothing written there
    assert {a.path for a in client.list_artifacts(ids["table3"], "report")} == published    # nor to MLflow


TABLE3_ROWS = ["base", "A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "D1", "D2",
               "Dbase", "D3", "D4", "E", "P0", "big"]


def test_learning_curves_past_ten_rows_are_drawn_by_group_against_the_base():
    from harness.report.curves import curve_panels
    # Table 3's rows by letter (Dbase with D), a letter of one row (E, P0) with the others, the base in none
    assert curve_panels(TABLE3_ROWS) == [["A1", "A2", "A3", "A4"], ["B1", "B2"],
                                         ["C1", "C2", "C3", "C4", "C5", "C6", "C7"], ["D1", "D2", "Dbase", "D3", "D4"],
                                         ["E", "P0", "big"]]
    named = ["base", "rope", "prenorm", "rmsnorm", "swiglu", "gqa", "all", "W4", "W8", "W12", "x", "y"]
    assert curve_panels(named) == [["W4", "W8", "W12"], ["rope", "prenorm", "rmsnorm", "swiglu"],
                                   ["gqa", "all", "x", "y"]]                  # 8 of no letter: two even pieces
    depth = [f"{norm}{n}{warm}" for n in (6, 12, 24) for norm in ("post", "pre") for warm in ("", "_nowarmup")]
    assert curve_panels(depth) == [["post6_nowarmup", "pre6", "pre6_nowarmup"],      # no base: the first row's
                                   ["post12", "post12_nowarmup", "pre12", "pre12_nowarmup"],
                                   ["post24", "post24_nowarmup", "pre24", "pre24_nowarmup"]]


def test_a_22_row_study_draws_a_pair_of_panels_a_group(tmp_path, monkeypatch):
    from harness.report.curves import plot_learning_curves
    hist, recs = {}, []
    for i, row in enumerate(TABLE3_ROWS):
        for seed in range(2):
            rid = f"{row}-{seed}"
            hist[(rid, "train_loss")] = [(s, 6.0 - s / 400 - 0.01 * i) for s in range(50, 1601, 50)]
            hist[(rid, "dev_ppl")] = [(s, 30.0 / (1 + s / 200) + 0.1 * i) for s in range(200, 1601, 200)]
            recs.append({"run_id": rid, "tags.row": row, "status": "FINISHED", "tags.profile": "tiny"})
    monkeypatch.setattr(logged, "metric_history", lambda uri, rid, key: hist.get((rid, key), []))
    runs = pd.DataFrame(recs)
    grouped = imread(plot_learning_curves("table3", runs, TABLE3_ROWS, "x", tmp_path / "all.png"))
    one = imread(plot_learning_curves("table3", runs, TABLE3_ROWS[:6], "x", tmp_path / "six.png"))
    # five groups of two panels stack into a tall figure; six rows keep the one wide pair
    assert grouped.shape[0] > 1.2 * grouped.shape[1] and one.shape[0] < 0.5 * one.shape[1]


def test_a_report_of_a_study_still_running_says_which_rows_have_not_finished(tmp_path):
    # An invocation killed midway (its session ended): base finished, A1 still training, C4 not started. The
    # claims that read them say so, where a row the invocation never had is "not run"; the header counts the
    # trials started so far.
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    trials = [t for t in TABLE3 if t[0] in ("base", "A1")]
    parent = log_study(client, "table3", trials, "base,A1,C4")
    a1 = [r for r in client.search_runs([client.get_experiment_by_name("table3").experiment_id])
          if r.data.tags.get("row") == "A1"]
    for r in a1:
        client.update_run(r.info.run_id, status="RUNNING")
    client.delete_tag(parent, "n_trials")
    client.update_run(parent, status="KILLED")
    write_report("table3", tmp_path / "out", uri)
    text = (tmp_path / "out" / "table3.md").read_text()
    why = {ln.split("`")[1]: ln for ln in text.splitlines() if ln.startswith("| `")}
    assert "not finished yet: A1 has no finished seed" in why["single_head_worse"]
    assert "not finished yet: C4 not started" in why["wider_better"]              # C5 never in this invocation
    assert "its rows were not run in this invocation" in why["smaller_dk_hurts"]  # B1 never in it
    assert "4 trials started so far, 0 failed (the invocation has not finished)" in text


# ------------------------------------------------------------------------------------------ records
# harness/record.py: the record `report` writes beside each report, and `report --record` regenerating the report
# from it byte for byte with no MLflow store.

def test_the_trials_table_comes_back_from_a_record_with_its_values_and_dtypes():
    t0 = pd.Timestamp("2026-12-06 10:00:00.123456", tz="UTC")
    df = pd.DataFrame({
        "run_id": pd.Series(["a", "b", "c"], dtype="str"),
        "metrics.dev_ppl": [5.54, math.nan, 1 / 3],
        "params.model.d_model": pd.Series(["256", None, "128"], dtype="str"),
        "tags.note": pd.Series([None, "x", {"k": 1}], dtype="object"),
        "start_time": pd.Series([t0, pd.NaT, t0], dtype="datetime64[us, UTC]"),
        "steps": pd.Series([1, 2, 3], dtype="int64"),
        "ok": [True, False, True]})
    back = record.table_from_json(json.loads(json.dumps(record.table_to_json(df), allow_nan=True)))
    pd.testing.assert_frame_equal(back, df, check_exact=True, check_index_type=True)
    assert list(back.dtypes.astype(str)) == list(df.dtypes.astype(str)) and back["metrics.dev_ppl"][2] == 1 / 3
    shuffled = df.iloc[[2, 0]]                            # an index other than 0..n-1 is kept as it was
    assert list(record.table_from_json(record.table_to_json(shuffled)).index) == [2, 0]


@pytest.fixture
def recorded(tmp_path):
    """Two studies' reports (one a named invocation) made from a store, a JSON artifact read through tracking, and
    the store then deleted."""
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    log_study(client, "table3", TABLE3, "base,A1,C4,D1")
    log_study(client, "modern", MODERN, "base,F1,F2", variant="corpus2")
    out = tmp_path / "reports"
    report_all(out, uri)
    return tmp_path, out, uri


def test_a_report_made_from_a_store_agrees_with_the_same_store_at_once(recorded, capsys, monkeypatch):
    """Publishing a report sets tags on its parent run (the report's text): its record leaves them out, or the next
    --check would find the record changed. A report made before records existed (none beside it) is not stale."""
    tmp_path, out, uri = recorded
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["report", "--out", str(out), "--check"]) == 0, capsys.readouterr().out
    (out / "table3.record.json.gz").unlink()
    assert main(["report", "--out", str(out), "--check"]) == 0
    assert "agrees with" in capsys.readouterr().out


def test_a_report_regenerates_from_its_record_byte_for_byte_without_the_store(recorded, monkeypatch):
    tmp_path, out, uri = recorded
    records = sorted(out.rglob(f"*{record.SUFFIX}"))
    assert [p.relative_to(out).as_posix() for p in records] == ["corpus2/modern.record.json.gz",
                                                                "table3.record.json.gz"]
    for p in (tmp_path / "store").rglob("*"):            # no store to read from: the records alone
        if p.is_file():
            p.unlink()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/nowhere/mlflow.db")
    again = tmp_path / "again"
    assert main(["report", "--record", *map(str, records), "--out", str(again)]) == 0
    made = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert made == {p.relative_to(again) for p in again.rglob("*") if p.is_file()}
    assert len(made) >= 8 and any(p.suffix == ".png" for p in made)
    index = (again / "README.md").read_text(encoding="utf-8")      # the index links each report's record
    assert "([csv](table3.csv), [record](table3.record.json.gz))" in index
    assert "[record](corpus2/modern.record.json.gz)" in index
    assert all((out / p).read_bytes() == (again / p).read_bytes() for p in made)   # the record itself too
    # --check against the reports made from the store: they agree; a line edited by hand is found
    assert main(["report", "--record", *map(str, records), "--out", str(out), "--check"]) == 0
    md = out / "table3.md"
    md.write_text(md.read_text(encoding="utf-8").replace("## Claims", "## Claims, edited"), encoding="utf-8")
    assert main(["report", "--record", *map(str, records), "--out", str(out), "--check"]) == 1


def test_the_record_holds_what_the_report_read_and_a_json_artifact(recorded):
    tmp_path, out, uri = recorded
    body = json.loads(gzip.decompress((out / "table3.record.json.gz").read_bytes()))
    assert body["study"] == "table3" and body["profile"] == "tiny" and body["variant"] == ""
    assert len(body["runs"]["index"]) == len(TABLE3) and body["parent"]["tags"]["kind"] == "study"
    curves = {k for hist in body["histories"].values() for k in hist}
    assert "train_loss" in curves                         # the learning curves' histories, read for the plot
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("table3").experiment_id], "tags.row = 'base'")[0]
    client.log_dict(run.info.run_id, {"heads": [[0.5, 0.25]]}, "heads.json")
    with logged.recording() as reads:
        cols = list(logged.study_results(uri, "table3")["runs"].columns)
        # MLflow's own column order follows a set's (another in each process); the record's may not
        assert [c for c in cols if "." in c] == sorted(c for c in cols if "." in c) and cols[0] == "run_id"
        assert logged.artifact_json(uri, run.info.run_id, "heads.json") == {"heads": [[0.5, 0.25]]}
        assert logged.artifact_json(uri, run.info.run_id, "absent.json") is None
    path = record.save(tmp_path / "t.record.json.gz", reads, "table3")
    first = path.read_bytes()
    rec_uri = logged.record_uri(path)
    assert logged.artifact_json(rec_uri, run.info.run_id, "heads.json") == {"heads": [[0.5, 0.25]]}
    assert logged.artifact_json(rec_uri, run.info.run_id, "absent.json") is None
    assert logged.list_studies(rec_uri) == ["table3"] and logged.study_results(rec_uri, "modern") is None
    assert record.save(path, reads, "table3").read_bytes() == first          # deterministic: no time in the gzip header


def test_a_record_without_what_the_report_reads_or_not_a_record_is_one_sentence(recorded, tmp_path, capsys):
    _, out, _ = recorded
    body = json.loads(gzip.decompress((out / "table3.record.json.gz").read_bytes()))
    body["histories"] = {}
    thin = tmp_path / "thin.record.json.gz"
    thin.write_bytes(gzip.compress(json.dumps(body).encode()))
    assert main(["report", "--record", str(thin), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"the record {thin} holds no history of metric" in err
    assert "MLFLOW_TRACKING_URI" in err and "Traceback" not in err
    bad = tmp_path / "bad.record.json.gz"
    bad.write_text("not gzip", encoding="utf-8")
    for path, said in ((bad, "is not a study record written by"), (tmp_path / "none.gz", "there is no record at")):
        assert main(["report", "--record", str(path), "--out", str(tmp_path / "y")]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and err.count("\n") == 0
    assert not any((tmp_path / "x").rglob("*"))                     # nothing half-written
    good = out / "table3.record.json.gz"
    broken = tmp_path / "broken.record.json.gz"
    data = bytearray(good.read_bytes())
    data[20] ^= 0xFF                                        # a damaged deflate stream (zlib.error, not OSError)
    broken.write_bytes(bytes(data))
    malformed = json.loads(gzip.decompress(good.read_bytes()))
    malformed["histories"] = {"r": {"train_loss": [[1]]}}
    odd = tmp_path / "odd.record.json.gz"
    odd.write_bytes(gzip.compress(json.dumps(malformed).encode()))
    for path in (broken, odd):
        assert main(["report", "--record", str(path), "--out", str(tmp_path / "z")]) == 2
        err = capsys.readouterr().err.strip()
        assert "is not a study record written by" in err and err.count("\n") == 0 and "Traceback" not in err
    # several records, one missing: nothing is written, not even the good one's report
    assert main(["report", "--record", str(good), str(tmp_path / "none.gz"), "--out", str(tmp_path / "w")]) == 2
    assert not (tmp_path / "w").exists()
    with pytest.raises(UserError, match="format"):
        body["format"] = 99
        thin.write_bytes(gzip.compress(json.dumps(body).encode()))
        record.load(thin)


def test_recordings_nest_and_a_rewritten_record_is_read_again(recorded, tmp_path):
    _, out, uri = recorded
    with logged.recording() as outer:
        with logged.recording() as inner:
            logged.study_results(uri, "table3")
        logged.study_results(uri, "modern", variant="corpus2")
    assert inner.results["parent"]["tags"]["study"] == "table3"
    assert outer.results["parent"]["tags"]["study"] == "modern" and logged._RECORDING == []
    path = tmp_path / "r.record.json.gz"
    path.write_bytes((out / "table3.record.json.gz").read_bytes())
    rec_uri = logged.record_uri(path)
    assert logged.list_studies(rec_uri) == ["table3"]
    path.write_bytes((out / "corpus2" / "modern.record.json.gz").read_bytes())
    assert logged.list_studies(rec_uri) == ["modern"] and logged.variants(rec_uri, "modern") == ["corpus2"]
