"""Checks of the implementation ("check", harness/paper/checks.yaml): a statement of the paper that this code decides
by construction (an analytic FLOP count, an identity, a size the code fixes) measured as a value claim is (the value
against the formula, within a tolerance), but read as "passes" or "fails", never as a claim of the paper that holds.
A correct implementation cannot contradict it; what it catches is a broken one, and tests/test_checks.py shows each
check failing on one. The report gives checks a table of their own and counts none among the claims.
"""

from __future__ import annotations

from harness.report.claim_kinds.registry import register
from harness.report.claim_kinds.value import Value

# a value claim's verdicts, in a check's words (none of them a claim's, so no count of claims reads them)
WORDS = {"holds": "passes", "contradicted": "fails", "inconclusive": "undecided", "not run": "not checked"}


class Check(Value):
    name = "check"
    is_check = True
    note = ""

    def judge(self, claim, values, curves) -> dict:
        got = super().judge(claim, values, curves)
        return {**got, "verdict": WORDS[got["verdict"]],
                "parts": [{**p, "verdict": WORDS[p["verdict"]]} for p in got.get("parts", [])]}

    def why(self, c: dict, diag: dict[str, dict], deps: dict | None, with_base: bool) -> str:
        back = {v: k for k, v in WORDS.items()}          # the value kind's sentence, in a check's words
        said = super().why({**c, "verdict": back[c["verdict"]],
                            "parts": [{**p, "verdict": back[p["verdict"]]} for p in c.get("parts", [])]},
                           diag, deps, with_base)
        for value_word, check_word in WORDS.items():
            said = said.replace(f"({value_word})", f"({check_word})")
        return said

    def describe(self, claim) -> str:
        return "check: " + super().describe(claim)


register(Check())
