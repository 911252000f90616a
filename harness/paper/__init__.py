"""The paper's published numbers, loaded from tables.yaml (the one file that holds them) and checked on load."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

TABLES = Path(__file__).with_name("tables.yaml")
_TABLE3_COLUMNS = {"N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "steps", "ppl", "bleu",
                   "params", "positional"}


@lru_cache(maxsize=1)
def load_tables() -> dict:
    data = yaml.safe_load(TABLES.read_text(encoding="utf-8"))
    rows = data["table3"]["rows"]
    for name, row in rows.items():
        extra = set(row) - _TABLE3_COLUMNS
        if extra:
            raise ValueError(f"{TABLES}: table3 row {name} has unknown columns {sorted(extra)}.")
    return data


def table3_model_overrides(row: dict) -> dict:
    """The architecture columns of a Table 3 row as TransformerConfig fields (the paper's names -> ours)."""
    out = {"n_layers": row["N"], "d_model": row["d_model"], "d_ff": row["d_ff"], "n_heads": row["h"],
           "d_k": row["d_k"], "d_v": row["d_v"], "p_drop": row["P_drop"]}
    if "positional" in row:
        out["positional"] = row["positional"]
    return out
