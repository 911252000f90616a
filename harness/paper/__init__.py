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


# The paper's names for its columns (Table 3's header) -> the settings that hold them (section.field), the one
# map between the two: the study overrides below and every report's columns read it.
PAPER_COLUMNS = {"N": "model.n_layers", "d_model": "model.d_model", "d_ff": "model.d_ff", "h": "model.n_heads",
                 "d_k": "model.d_k", "d_v": "model.d_v", "P_drop": "model.p_drop",
                 "eps_ls": "train.label_smoothing", "steps": "train.steps"}


def columns(*names: str) -> dict[str, str]:
    """PAPER_COLUMNS for these of the paper's column names, in this order."""
    return {n: PAPER_COLUMNS[n] for n in names}


def table3_model_overrides(row: dict) -> dict:
    """The architecture columns of a Table 3 row as model settings (the paper's names -> ours)."""
    out = {PAPER_COLUMNS[n].split(".", 1)[1]: row[n] for n in ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop")}
    if "positional" in row:
        out["positional"] = row["positional"]
    return out


# Table 1's rows (and the §4 text for separable and contiguous convolutions) by the probe's layer names.
TABLE1_ROWS = {"sdpa": "Self-Attention", "plain": "Self-Attention", "rnn_loop": "Recurrent",
               "rnn_torch": "Recurrent", "conv": "Convolutional (contiguous)", "conv_dilated": "Convolutional",
               "conv_separable": "Convolutional (separable)", "restricted": "Self-Attention (restricted)",
               "window_model": "Self-Attention (restricted)"}
# One cached decoding step (the last of n positions) pays one position's share of its row: the complexity over n,
# so one power of n less. Derived here, not printed in the paper.
TABLE1_PER_STEP = {"decode_full": "Self-Attention", "decode_window": "Self-Attention (restricted)"}


@lru_cache(maxsize=1)
def table1_columns() -> dict[str, dict]:
    """The paper's Table 1 columns for each layer the scaling probe measures: row name, complexity, the
    exponents in n and d that the complexity implies, sequential operations and maximum path length."""
    t1 = load_tables()["table1"]
    rows = {**t1["rows"], **t1["text"]}
    out = {kind: {"row": name, "complexity": rows[name]["complexity"], "exp_n": rows[name]["exp_n"],
                  "exp_d": rows[name]["exp_d"], "seq": rows[name]["sequential"], "path": rows[name]["path"]}
           for kind, name in TABLE1_ROWS.items()}
    for kind, name in TABLE1_PER_STEP.items():
        out[kind] = {"row": f"{name}, one decoding step", "complexity": f"{rows[name]['complexity']} / n",
                     "exp_n": rows[name]["exp_n"] - 1, "exp_d": rows[name]["exp_d"], "seq": rows[name]["sequential"],
                     "path": rows[name]["path"]}
    return out
