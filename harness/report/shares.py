"""The source's share by target position (harness/eval/source_attention.py's src_{kind}_pT metrics, as MLflow's
runs table holds them) and its fade from the first positions to the later ones: what both the source-attention
section (harness/report/source_attention.py) and the claims (harness/report/verdicts.py) read. Plain pandas."""

from __future__ import annotations

import re

import pandas as pd

# The fade: the mean share over the first EARLY positions against the mean over the positions from LATE on
# (as far as every row measured them), fixed before any run was read.
EARLY, LATE = 3, 8


def positions(runs: pd.DataFrame, kind: str) -> list[int]:
    """The target positions (from 1) some run logged `src_{kind}_pN` for, in order (kind: mass, contrib,
    uniform, or one layer's, e.g. mass_L2)."""
    pattern = re.compile(rf"^metrics\.src_{re.escape(kind)}_p(\d+)$")
    return sorted(int(m[1]) for c in runs.columns if (m := pattern.match(c)))


def fade_per_run(done: pd.DataFrame, kind: str, pos: list[int] | None = None) -> pd.Series | None:
    """Each run's (row of `done`) mean share over positions 1..EARLY minus that over LATE.. (> 0: the source
    fades), over `pos` (default: the positions some run of `done` measured); None without both ranges."""
    pos = positions(done, kind) if pos is None else pos
    early = [p for p in pos if p <= EARLY and f"metrics.src_{kind}_p{p}" in done]
    late = [p for p in pos if p >= LATE and f"metrics.src_{kind}_p{p}" in done]
    if not early or not late:
        return None
    return done[[f"metrics.src_{kind}_p{p}" for p in early]].mean(axis=1) - \
        done[[f"metrics.src_{kind}_p{p}" for p in late]].mean(axis=1)
