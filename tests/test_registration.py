"""Registration from git (harness/report/registration.py): a claim committed before its runs is "registered",
one committed after them says so with its commit, a reworded claim keeps its registration, and a claim redefined
after a committed report showed its verdict says how often."""

import subprocess

import pytest
import yaml

from harness.report.registration import CLAIMS_FILE, registration


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
    assert (
        registration("heads_help", {ran}, root=repo.root) == f"written after these runs' figures (commit {moved[:7]})"
    )
    # Runs at two commits: registered only if the claim is in both.
    assert registration("heads_help", {ran, moved}, root=repo.root).startswith("written after")


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


def test_this_checkout_shows_the_redefinitions_the_history_holds():
    # dropout_helps was redefined twice after reports had shown its verdict (commits dc76119 and 067042e).
    status = registration("dropout_helps", {"8b70b25587190720991b40b6eb6375d2fb4511b6"})
    if status.startswith("unknown"):
        pytest.skip("no git history of the project here (" + status + ")")
    assert status.startswith("written after these runs' figures (commit 067042e)")
    assert "redefined 2 times after its verdict was known" in status
