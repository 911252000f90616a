"""Every departure of a profile from the paper, generated from the study file rather than typed: each row
resolved under the profile that runs and under the study's `paper` profile, and every setting where the
two differ (widths, depth, steps, warmup, vocabulary, batches, lr_scale, tied embeddings, max_extra,
averaging, the data and the made-up corpus's settings). The runner keeps the list in the study's parent
run (tag `departures`), and every report prints it under its header (harness/report/header.py)."""

from __future__ import annotations

import dataclasses
import json

from harness.errors import UserError
from harness.train.config import measurement_keys
from model import to_dict

# Settings that say how a run is operated or logged, not what it computes: never a departure.
OPERATIONAL = {"train.log_every", "train.eval_every", "train.device", "train.amp", "train.prefetch", "train.seed",
               "train.compile", "train.compile_mode", "train.eval_test", "train.max_minutes", "data.cache_dir"}
SYNTH_ONLY = ("train_pairs", "dev_pairs", "test_pairs", "seed", "lexicon_scale", "max_depth", "max_words", "target",
              "lexicon_seed")
PER_SIDE = ("model.n_enc_layers", "model.n_dec_layers")
MAX_TAG = 7_900        # MLflow keeps tag values up to 8,000 characters


def _flat(trial) -> dict[str, object]:
    return {**{f"model.{k}": v for k, v in to_dict(trial.model).items()},
            **{f"train.{k}": v for k, v in trial.train.to_dict().items()},
            **{f"data.{k}": v for k, v in dataclasses.asdict(trial.data).items()}}


def departures(study) -> list[dict]:
    """[{"key": "model.d_model", "values": [{"ours": 128, "paper": 512, "rows": ["base", ...]}, ...]}, ...] for
    every setting where a row of this profile differs from the same row in the study's `paper` profile;
    [] for the paper profile itself, for probe studies, and for a study without a paper profile."""
    from harness.study.kinds import load_study
    if study.kind != "train" or study.profile == "paper":
        return []
    try:
        paper = load_study(study.path, "paper", None, [study.seeds[0]])
    except UserError:
        return []
    theirs = {t.row: _flat(t) for t in paper.trials if t.row in study.rows}
    if "base" in {t.row for t in paper.trials}:
        # A row the paper profile skips (table3's Dbase: there it would train as the base) is the base there.
        paper_base = next(_flat(t) for t in paper.trials if t.row == "base")
        theirs.update({r: dict(paper_base) for r in study.rows if r not in theirs})
    for trial in study.trials:      # the made-up corpus's own settings mean nothing for the paper's WMT
        if trial.row in theirs and trial.data.name == "synth" != theirs[trial.row]["data.name"]:
            theirs[trial.row].update({f"data.{k}": None for k in SYNTH_ONLY})
    out: dict[str, dict[tuple, list[str]]] = {}
    measured = {f"train.{k}" for k in measurement_keys()}      # what a row measures is no departure
    for trial in study.trials:
        if trial.seed != study.seeds[0] or trial.row not in theirs:
            continue
        ours = _flat(trial)
        for key, value in ours.items():
            if key in OPERATIONAL or key in measured or theirs[trial.row].get(key) == value:
                continue
            side = "model.n_layers" if key in PER_SIDE and "model.n_layers" in ours else None   # a rival has no N
            if side and value == ours[side] and theirs[trial.row].get(key) == theirs[trial.row][side]:
                continue            # per-side depth that follows N: N's line says it
            pair = (json.dumps(value), json.dumps(theirs[trial.row].get(key)))
            out.setdefault(key, {}).setdefault(pair, []).append(trial.row)
    return [{"key": key, "values": [{"ours": json.loads(o), "paper": json.loads(p), "rows": rows}
                                    for (o, p), rows in groups.items()]}
            for key, groups in out.items()] + [{"note": note} for note in study.departure_notes]


def departures_tag(study) -> dict[str, str]:
    """The parent run's `departures` tag (JSON), shortened to fit MLflow's tag size if it must be."""
    items = departures(study)
    text = json.dumps(items, separators=(",", ":"))
    if len(text) > MAX_TAG:     # many rows: keep each setting's values, drop the row lists
        text = json.dumps([d if "note" in d else
                           {"key": d["key"], "values": [{**v, "rows": [f"{len(v['rows'])} rows"]} for v in d["values"]]}
                           for d in items], separators=(",", ":"))[:MAX_TAG]
    return {"departures": text}
