"""Registration from git (harness/report/registration.py): a claim committed before its runs is "registered",
one committed after them says so with its commit, a reworded claim keeps its registration, and a claim redefined
after a committed report showed its verdict says how often."""

import subprocess

import pytest
import yaml

from harness.report.registration import CLAIMS_FILE, late_profile_changes, registration


def _claim(margin: float, text: str = "h=8 beats h=1") -> dict:
    return {"id": "heads_help", "study": "table3", "source": "§6.2", "text": text, "metric": "dev_nll",
            "a": "base", "expect": "better", "better": "lower", "b": "A1", "margin": margin}


class Repo:
    def __init__(self, root):
        self.root = root
        self.git("init", "-q")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "user.name", "t")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def claims(self, *entries: dict) -> None:
        self.write(CLAIMS_FILE, yaml.safe_dump({"version": 1, "claims": list(entries)}))

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    return Repo(tmp_path)


def test_a_claim_committed_before_its_runs_is_registered_and_one_after_is_not(repo):
    repo.claims(_claim(0.05))
    claimed = repo.commit("claim")
    repo.write("harness/x.py", "x = 1\n")
    ran = repo.commit("the runs' code")
    assert registration("heads_help", {ran}, root=repo.root) == f"registered ({claimed[:7]})"
    assert registration("heads_help", {claimed}, root=repo.root) == f"registered ({claimed[:7]})"   # same commit
    repo.claims(_claim(0.10))                  # the margin moved after the runs
    moved = repo.commit("wider margin")
    assert registration("heads_help", {ran}, root=repo.root) == \
        f"post hoc: written after these runs' figures (commit {moved[:7]})"
    # Runs at two commits: registered only if the claim is in both.
    assert registration("heads_help", {ran, moved}, root=repo.root).startswith("post hoc: written after")


def test_rewording_keeps_the_registration(repo):
    repo.claims(_claim(0.05))
    claimed = repo.commit("claim")
    ran = claimed
    repo.claims(_claim(0.05, text="eight heads beat one"))
    repo.commit("reword")
    assert registration("heads_help", {ran}, root=repo.root) == f"registered ({claimed[:7]})"


def test_a_redefinition_after_a_shown_verdict_is_counted(repo):
    repo.claims(_claim(0.05))
    repo.commit("claim")
    repo.write("reports/table3.md", "| `heads_help` (§6.2) | ... | **contradicted** |\n")
    shown = repo.commit("report")
    repo.claims(_claim(0.10))
    first = repo.commit("redefine")
    repo.claims(_claim(0.20))
    second = repo.commit("redefine again")
    repo.write("harness/x.py", "x = 2\n")
    ran = repo.commit("rerun")
    assert registration("heads_help", {ran}, root=repo.root) == (
        f"registered ({second[:7]}); redefined 2 times after its verdict was known (first shown at {shown[:7]}; "
        f"{first[:7]}, {second[:7]})"
    )


def test_what_cannot_be_decided_says_why(repo, tmp_path_factory):
    repo.claims(_claim(0.05))
    claimed = repo.commit("claim")
    assert registration("heads_help", {"0" * 40}, root=repo.root).startswith("unknown: the runs' commit is not in")
    assert registration("heads_help", {claimed}, dirty=True, root=repo.root).startswith(
        "unknown: the runs ran from uncommitted changes"
    )
    repo.claims(_claim(0.07))  # edited, not committed
    assert registration("heads_help", {claimed}, root=repo.root).startswith("not yet committed")
    plain = tmp_path_factory.mktemp("plain")
    (plain / "harness" / "paper").mkdir(parents=True)
    (plain / CLAIMS_FILE).write_text(yaml.safe_dump({"claims": [_claim(0.05)]}))
    assert registration("heads_help", {claimed}, root=plain).startswith("unknown: not a git checkout")


def test_one_run_without_a_commit_leaves_the_registration_unknown(repo):
    # It could have run before the claim was written: the other runs' commits cannot vouch for it.
    repo.claims(_claim(0.05))
    claimed = repo.commit("claim")
    assert registration("heads_help", {claimed, ""}, root=repo.root).startswith(
        "unknown: some of the runs recorded no commit")
    assert registration("heads_help", {claimed, "unknown"}, root=repo.root).startswith("unknown: some of the runs")
    assert registration("heads_help", {""}, root=repo.root).startswith("unknown: the runs recorded no commit")


def test_a_claim_over_four_rows_is_registered_against_the_commits_of_all_four(repo, monkeypatch):
    # depth_gap_grows reads x, y, u and v (a gap between gaps); the verdict's a_row and b_row name two of them.
    # Rows y and v ran before the claim existed: the report's registration cell must say so.
    import pandas as pd

    from harness.report import claims_section
    from harness.report import registration as reg
    from harness.report.verdicts import Claim, rows_read
    repo.write("harness/x.py", "x = 0\n")
    early = repo.commit("y and v ran")
    gap = {"id": "gap_grows_here", "study": "depth", "source": "-", "text": "-", "metric": "dev_nll",
           "a": ["post24", "pre24"], "expect": "gap_grows", "better": "lower", "b": ["post6", "pre6"]}
    repo.claims(gap)
    claimed = repo.commit("claim")
    claim = Claim(**gap)
    assert rows_read(claim, {"post24", "pre24", "post6", "pre6"}) == {"post24", "pre24", "post6", "pre6"}
    runs = pd.DataFrame({"tags.row": ["post24", "pre24", "post6", "pre6"], "status": ["FINISHED"] * 4,
                         "tags.git_sha": [claimed, early, claimed, early], "tags.git_dirty": ["False"] * 4})
    monkeypatch.setattr(claims_section, "registration",
                        lambda cid, shas, dirty=False, report=None: reg.registration(cid, shas, dirty, root=repo.root,
                                                                                      report=report))
    c = {"claim": claim, "a_row": "post24", "b_row": "post6"}
    registered = claims_section.claim_registration
    assert registered("gap_grows_here", c, runs) == \
        f"post hoc: written after these runs' figures (commit {claimed[:7]})"
    runs["tags.git_sha"] = claimed
    assert registered("gap_grows_here", c, runs) == f"registered ({claimed[:7]})"
    runs.loc[1, "tags.git_sha"] = None                     # a run that recorded no commit
    assert registered("gap_grows_here", c, runs).startswith("unknown: some of the runs recorded no commit")
    # a run the verdict does not read (it failed, at an early commit) does not decide the registration
    runs.loc[1, "tags.git_sha"] = claimed
    failed = pd.DataFrame({"tags.row": ["pre6"], "status": ["FAILED"], "tags.git_sha": [early],
                           "tags.git_dirty": ["False"]})
    assert registered("gap_grows_here", c, pd.concat([runs, failed])) == f"registered ({claimed[:7]})"


def test_the_rows_a_verdict_reads():
    from harness.report.verdicts import Claim, rows_read
    base = {"id": "x", "study": "t", "source": "-", "text": "-", "metric": "dev_nll", "better": "lower"}
    first = Claim(**base, a={"first": ["Dbase", "base"]}, b="D1", expect="better")
    assert rows_read(first, {"Dbase", "base", "D1"}) == {"Dbase", "D1"}        # the first that ran is read
    assert rows_read(first, {"base", "D1"}) == {"base", "D1"}
    best = Claim(**base, a="big", b={"best": ["gnmt", "convs2s"]}, expect="better")
    assert rows_read(best, {"big", "gnmt"}) == {"big", "gnmt", "convs2s"}     # the best is chosen among all
    value = Claim(**{**base, "better": ""}, a=["crossover_d64", "crossover_d256"], expect="value", margin=0.1)
    assert rows_read(value, set()) == {"crossover_d64", "crossover_d256"}


def test_this_checkout_shows_the_redefinitions_the_history_holds():
    # dropout_helps was redefined twice after reports had shown its verdict (commits dc76119 and 067042e).
    status = registration("dropout_helps", {"8b70b25587190720991b40b6eb6375d2fb4511b6"})
    if status.startswith("unknown"):
        pytest.skip("no git history of the project here (" + status + ")")
    assert status.startswith("post hoc: written after these runs' figures (commit 067042e)")
    assert "redefined 2 times after its verdict was known" in status


def test_registration_reads_the_claim_at_each_runs_own_commit_so_a_merge_does_not_confuse_it(repo):
    repo.claims(_claim(0.05))
    repo.commit("claim on main")
    repo.git("branch", "side")
    repo.write("harness/x.py", "x = 1\n")
    ran = repo.commit("the runs' code on main")
    repo.git("checkout", "-q", "side")
    repo.claims(_claim(0.05), {**_claim(0.1), "id": "other"})     # a side branch adds another claim
    repo.commit("side claim")
    repo.git("checkout", "-q", "-")
    repo.git("merge", "-q", "--no-edit", "side")
    # the merge touches claims.yaml after the runs; heads_help is still as the runs' code held it
    assert registration("heads_help", {ran}, root=repo.root).startswith("registered")


def test_a_claim_removed_and_brought_back_looser_counts_as_redefined(repo):
    repo.claims(_claim(0.05))
    repo.commit("claim")
    repo.write("reports/table3.md", "| `heads_help` (§6.2) | ... | **contradicted** |\n")
    shown = repo.commit("report")
    repo.claims({**_claim(0.05), "id": "placeholder"})
    repo.commit("claim removed")
    repo.claims(_claim(0.3))
    back = repo.commit("claim back, looser")
    assert f"redefined once after its verdict was known (first shown at {shown[:7]}; {back[:7]})" in registration(
        "heads_help", {back}, root=repo.root)


def test_settings_changed_after_a_test_figure_are_listed_from_the_reports_history(repo, tmp_path_factory):
    study = "studies/t.yaml"
    repo.write(study, "study: t\nrows: {base: {}}\nprofiles:\n  m30k: {train: {steps: 2000}, rows: {base: {}}}\n")
    repo.commit("study")
    assert late_profile_changes(study, "m30k", "reports/m30k/t.md", root=repo.root) == []     # no report yet
    repo.write("reports/m30k/t.md", "test BLEU 30\n")
    first = repo.commit("report with a test figure")
    repo.write(study, "study: t\nrows: {base: {}, big: {d_model: 2}}\nprofiles:\n"
                      "  m30k: {train: {steps: 12000, patience: 5}, rows: {base: {}}, resources: {cpu: 2}}\n")
    changed = repo.commit("the rule, and a new row")
    lines = late_profile_changes(study, "m30k", "reports/m30k/t.md", root=repo.root)
    assert lines == [f"(the first report with this profile's figures was committed at {first[:7]})",
                     f"`train.patience`: null → 5 at {changed[:7]}", f"`train.steps`: 2000 → 12000 at {changed[:7]}",
                     f"row `big` added or changed at {changed[:7]} (it had no test figure before)"]
    plain = tmp_path_factory.mktemp("plain")
    assert late_profile_changes(study, "m30k", "reports/m30k/t.md", root=plain) is None      # no git: unknown


def test_a_named_invocations_report_counts_the_profiles_earlier_test_figures(repo):
    # reports/m30k/rivals/t.md (a named invocation) came after reports/m30k/t.md had shown test figures of the same
    # profile: its section starts from that first report, so a setting changed between them is listed.
    study = "studies/t.yaml"
    repo.write(study, "study: t\nrows: {base: {}}\nprofiles:\n  m30k: {train: {steps: 2000}}\n")
    repo.commit("study")
    repo.write("reports/m30k/t.md", "test BLEU 30\n")
    first = repo.commit("the profile's first report")
    repo.write(study, "study: t\nrows: {base: {}}\nprofiles:\n  m30k: {train: {steps: 2000, curve: 100}}\n")
    changed = repo.commit("a setting, after a test figure")
    repo.write("reports/m30k/rivals/t.md", "test BLEU 25\n")
    repo.commit("the named invocation's report")
    alone = late_profile_changes(study, "m30k", "reports/m30k/rivals/t.md", root=repo.root)
    both = late_profile_changes(study, "m30k", ["reports/m30k/rivals/t.md", "reports/m30k/t.md"], root=repo.root)
    assert alone == []
    assert both == [f"(the first report with this profile's figures was committed at {first[:7]})",
                    f"`train.curve`: null → 100 at {changed[:7]}"]


def test_the_reports_of_a_profile_are_found_by_their_provenance():
    from harness.report.claims_section import reports_of
    assert {"reports/table3.md", "reports/corpus2/table3.md"} <= set(reports_of("table3", "tiny"))
    assert "reports/table3.md" not in reports_of("table3", "multi30k")


def test_a_claim_shown_as_not_run_had_no_verdict_to_know(repo):
    # A report that lists the claim as "not run" (its runs had not finished) shows no verdict: a redefinition after
    # it is not one "after its verdict was known"; after a report with a verdict, it is.
    repo.claims(_claim(0.05))
    repo.commit("claim")
    repo.write("reports/table3.md", "| `heads_help` (§6.2) | ... | – | **not run** | not finished yet |\n")
    repo.commit("report, nothing finished")
    repo.claims(_claim(0.10))
    early = repo.commit("redefine before any verdict")
    repo.write("reports/table3.md", "| `heads_help` (§6.2) | ... | +0.2 | **holds** | |\n")
    shown = repo.commit("report with a verdict")
    repo.claims(_claim(0.20))
    late = repo.commit("redefine after it")
    assert registration("heads_help", {late}, root=repo.root) == (
        f"registered ({late[:7]}); redefined once after its verdict was known (first shown at {shown[:7]}; "
        f"{late[:7]})")
    assert early not in registration("heads_help", {late}, root=repo.root)


# ---------------------------------------------------------------------- registration against the first figure seen

def _report(rows: list[str], command: str = "python -m harness run studies/table3.yaml --quiet",
            verdict: str = "") -> str:
    """A committed report's text as far as registration reads it: its provenance line and its rows."""
    lines = [f"**Provenance:** `{command}` · commit `x` · profile `tiny` · cpu · 2026-12-08", "",
             "| row | dev PPL |", "|---|---|", *[f"| **{r}** | 5.0 |" for r in rows]]
    return "\n".join(lines + ([f"| `heads_help` (§6.2) | ... | **{verdict}** |"] if verdict else [])) + "\n"


def test_a_claim_written_after_a_report_showed_its_rows_is_post_hoc_even_when_run_again(repo):
    repo.write("reports/table3.md", _report(["base", "A1"]))
    shown = repo.commit("the first report: base and A1 side by side")
    repo.claims(_claim(0.05))
    claimed = repo.commit("the claim, with a margin of ours")
    repo.write("harness/x.py", "x = 1\n")
    rerun = repo.commit("run again after the claim")
    # against the runs alone it would read registered; against the first figure seen it does not
    assert registration("heads_help", {rerun}, root=repo.root) == f"registered ({claimed[:7]})"
    assert registration("heads_help", {rerun}, root=repo.root, report="reports/table3.md") == (
        f"post hoc: its rows' figures were first committed at {shown[:7]} (reports/table3.md), before its definition "
        f"({claimed[:7]})")


def test_a_margin_loosened_in_the_commit_of_the_first_report_is_post_hoc(repo):
    repo.claims(_claim(0.05))
    repo.commit("the claim")
    repo.claims(_claim(0.20))
    repo.write("reports/table3.md", _report(["base", "A1"], verdict="holds"))
    both = repo.commit("the first report, and the margin loosened beside it")
    repo.write("harness/x.py", "x = 1\n")
    rerun = repo.commit("run again")
    assert registration("heads_help", {rerun}, root=repo.root, report="reports/table3.md").startswith(
        f"post hoc: its rows' figures were first committed at {both[:7]} (reports/table3.md), before its definition "
        f"({both[:7]})")


def test_a_renamed_claim_with_a_looser_margin_is_the_old_claim_redefined(repo):
    repo.claims(_claim(0.05))
    repo.commit("the claim")
    repo.write("reports/table3.md", _report(["base", "A1"], verdict="contradicted"))
    shown = repo.commit("its verdict shown")
    renamed = dict(_claim(0.20), id="eight_heads_help")
    repo.claims(renamed)
    moved = repo.commit("a new id, a looser margin")
    status = registration("eight_heads_help", {moved}, root=repo.root, report="reports/table3.md")
    assert status.startswith(f"post hoc: its rows' figures were first committed at {shown[:7]}")
    assert status.endswith(f"; redefined once after its verdict was known (first shown at {shown[:7]}; {moved[:7]})")
    # the same definition under the new id keeps the old one's history: no fresh start
    repo.claims(dict(_claim(0.05), id="eight_heads_help"))
    same = repo.commit("the old margin back under the new id")
    assert "redefined 2 times" in registration("eight_heads_help", {same}, root=repo.root)


def test_a_post_hoc_claim_judged_on_a_fresh_corpus_seed_is_confirmatory(repo):
    repo.write("reports/table3.md", _report(["base", "A1"]))
    shown = repo.commit("the first report")
    repo.claims(_claim(0.05))
    claimed = repo.commit("the claim, after it")
    fresh = "python -m harness run studies/table3.yaml --set data.seed=2 --name corpus2 --quiet"
    repo.write("reports/corpus2/table3.md", _report(["base", "A1"], command=fresh))
    ran = repo.commit("the claim judged on another corpus seed")
    assert registration("heads_help", {ran}, root=repo.root, report="reports/table3.md").startswith("post hoc")
    assert registration("heads_help", {ran}, root=repo.root, report="reports/corpus2/table3.md") == (
        f"confirmatory ({claimed[:7]}): registered before this data's first figures, post hoc on reports/table3.md "
        f"(its figures first at {shown[:7]})")


def test_the_papers_own_comparison_reads_registered_whenever_it_was_typed_in(repo):
    repo.write("reports/table3.md", _report(["base", "A1"]))
    repo.commit("the first report")
    repo.write("harness/x.py", "x = 1\n")
    early = repo.commit("the runs' code")
    repo.claims(dict(_claim(0.0), paper={"a": 4.91, "b": 5.29, "metric": "ppl"}))
    claimed = repo.commit("the paper's own comparison, margin 0")
    assert registration("heads_help", {claimed}, root=repo.root, report="reports/table3.md") == \
        f"registered ({claimed[:7]})"
    assert registration("heads_help", {early}, root=repo.root, report="reports/table3.md") == (
        f"registered ({claimed[:7]}; the paper's own comparison)")           # typed in after the runs, all the same


def test_a_change_to_an_included_profile_is_listed_and_moving_a_setting_into_it_is_not(repo):
    base = "studies/t3.yaml"
    study = "studies/m.yaml"
    repo.write(base, "study: t3\nrows: {base: {}}\nprofiles:\n  tiny: {train: {steps: 2000}}\n")
    repo.write(study, "study: m\nrows: {base: {}}\nprofiles:\n  tiny: {train: {steps: 2000, lr_scale: 0.5}}\n")
    repo.commit("two studies")
    repo.write("reports/m.md", "dev PPL 5\n")
    first = repo.commit("the first report of m")
    # m's own settings move into an include of t3's tiny profile: the settings that decide its runs are the same
    repo.write(study, "study: m\nrows: {base: {}}\nprofiles:\n"
                      "  tiny: {include: t3.yaml:tiny, train: {lr_scale: 0.5}}\n")
    repo.commit("include")
    assert late_profile_changes(study, "tiny", "reports/m.md", root=repo.root) == []
    repo.write(base, "study: t3\nrows: {base: {}}\nprofiles:\n  tiny: {train: {steps: 3000}}\n")
    changed = repo.commit("t3's tiny profile trains longer")
    assert late_profile_changes(study, "tiny", "reports/m.md", root=repo.root) == [
        f"(the first report with this profile's figures was committed at {first[:7]})",
        f"`train.steps`: 2000 → 3000 at {changed[:7]}"]
