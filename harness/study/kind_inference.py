"""The study kind `inference`: each row is one model shape timed at inference over batch sizes and source lengths
(harness/probes/inference.py). Its file's rows are probe settings (harness/probes/inference_spec.InferenceSpec):
base.probe -> row -> profile.probe, a `model` mapping merged key by key; its trial measures the shape and logs
each point as it is measured."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from harness.io import atomic_write
from harness.probes.inference_spec import InferenceSpec, inference_fields
from harness.study.estimate import Timing
from harness.study.spec import Checker, Selection, Study, StudyFile, load_probe_study
from harness.study.spec import probe_settings as checked_probe_settings
from harness.tracking import TrialRun
from harness.train.dist import SINGLE, Ranks
from harness.trial import Trial

probe_type = InferenceSpec


def probe_settings(chk: Checker, values: dict, where: str) -> dict:
    if "model" in values and not isinstance(values["model"], dict):
        chk.fail(f"{where}.model", f"must be a mapping of model settings, got {values['model']!r}.")
    out = checked_probe_settings(chk, {k: v for k, v in values.items() if k != "model"}, where, inference_fields())
    return {**out, **({"model": values["model"]} if "model" in values else {})}


def _merged(*layers: dict) -> dict:
    """Probe settings laid over each other, their `model` mappings merged key by key."""
    out: dict = {}
    for layer in layers:
        for k, v in layer.items():
            out[k] = {**out.get(k, {}), **v} if k == "model" else v
    if "model" in out:
        out["model"] = tuple(sorted(out["model"].items()))
    return out


def _spec(base: dict, row: dict, profile: dict) -> InferenceSpec:
    spec = InferenceSpec(**_merged(base, row, profile))
    spec.validate()
    from harness.probes.inference import model_config  # the shape must build: refused before any run
    model_config(spec)
    return spec


def load(file: StudyFile, sel: Selection) -> Study:
    """A study whose rows are shapes: base.probe -> row -> profile.probe (their `model` mappings merged)."""
    return load_probe_study(file, sel, probe_settings, _spec, "inference")


def print_trials(study: Study, timing: Timing = Timing()) -> None:
    from harness.probes.inference import model_config
    from model import to_dict
    print(f"{'trial':<20}{'hash':<14}{'family':<14}{'layers':<8}{'d_model':>8}{'heads q/kv':>12}"
          f"{'batches':>12}{'source lengths':>22}")
    for t in study.trials:
        m = to_dict(model_config(t.probe))
        layers = (m.get("n_layers") if m.get("family") == "decoder_only"
                  else f"{m.get('n_enc_layers')}+{m.get('n_dec_layers')}")
        print(f"{t.key:<20}{t.config_hash:<14}{m.get('family', ''):<14}{str(layers):<8}{m.get('d_model'):>8}"
              f"{str(m.get('n_heads')) + '/' + str(m.get('n_kv_heads')):>12}{str(list(t.probe.batches)):>12}"
              f"{str(list(t.probe.src_lens)):>22}")


def prepare(trials: list[Trial]) -> None:
    """Nothing to prepare: the probe makes its own inputs."""


def estimated_flops(trial: Trial) -> float:
    return 0.0          # timed, not trained: no order to choose


def summary_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    """Ten characters a column: the cache per token, and decoding at the first and the last point."""
    keys = sorted({k for m in metrics for k in m if k.startswith("decode_tok_s_b")},
                  key=lambda k: tuple(int(x[1:]) for x in k.rsplit("_", 2)[-2:]))
    picked = list(dict.fromkeys([keys[0], keys[-1]])) if keys else []
    return [("KV B/tok", "kv_bytes_per_token_formula"),
            *((f"tok/s {k.rsplit('_', 2)[-2]}{k.rsplit('_', 2)[-1]}", k) for k in picked)]


def params(trial: Trial) -> dict:
    from harness.probes.inference import model_config
    from model import to_dict
    probe = {k: (dict(v) if k == "model" else list(v) if isinstance(v, tuple) else v)
             for k, v in dataclasses.asdict(trial.probe).items()}
    return {"probe": probe, "model": to_dict(model_config(trial.probe))}


def run(trial: Trial, out_dir: Path, run: TrialRun, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """One shape: each point goes to MLflow as it is measured (step = its index), then every figure as final
    metrics with its `_b{batch}_s{len}` suffix; the whole result as inference.json."""
    from harness.probes.inference import flat_metrics, measure
    out_dir.mkdir(parents=True, exist_ok=True)
    count = [0]

    def on_point(point: dict) -> None:
        run.log_step(count[0], {k: v for k, v in point.items() if isinstance(v, (int, float)) and v is not None})
        count[0] += 1

    result = measure(trial.probe, on_point)
    metrics = {**flat_metrics(result), "device": result["device"], "dtype": result["dtype"],
               "torch_threads": result["threads"]}
    run.log_final({**metrics, **{f"arch.{k}": str(v) for k, v in result["manifest"].items()}}, 0)
    atomic_write(out_dir / "inference.json", json.dumps(result, indent=2) + "\n")
    run.log_artifacts([out_dir / "inference.json"])
    last = result["points"][-1]
    summary = (f"decode {last['decode_tok_s']:,.0f} tok/s, TTFT {last['ttft_ms']:.1f} ms at batch {last['batch']}, "
               f"source {last['src_len']}")
    return metrics, summary


def smoke(trial: Trial, cache_dir: Path) -> tuple[Trial, dict]:
    """Two tiny points, one repeat, and what its result must show: {metric: (low, high), or the name of a metric
    it equals}."""
    small = dataclasses.replace(trial, probe=dataclasses.replace(
        trial.probe, batches=(1,), src_lens=(4, 8), new_tokens=2, repeats=1, warmup=0, threads=1))
    return small, {"decode_tok_s_b1_s8": (1e-9, math.inf), "params": (1, math.inf),
                   "kv_bytes_per_token_b1_s8": "kv_bytes_per_token_formula"}
