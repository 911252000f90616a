"""The registry of measurements: probes taken beside or after training (agreement contrasts, the heads probe,
source attention, attention statistics, length buckets, the BLEU curve).

A measurement is one module and one `register` call. Its entry carries:
- its settings, a frozen dataclass of its own whose every field has a default (the defaults: not measured).
  A study file and `--set` spell a setting `train.NAME_FIELD` (e.g. `train.curve_bleu_sentences`), the key it had
  when it was a training setting, so that study files, run directories and trial hashes stay as they were;
- `check`: refuses, in one sentence before training, data or a model it cannot measure;
- when it runs: `at_init` (before the first update), `at_eval` (at each dev evaluation; `eval_at_last` adds
  the last step, before the final weights are averaged), `at_end` (on the final weights); each returns metrics;
- its metrics, each with its direction and how seeds aggregate, and the claims.yaml metric keys they feed;
- its report section.

Nothing here imports torch: a measurement's module imports its evaluation code inside its hooks, and the
reports load every measurement to render their sections (tests/test_measure.py checks that no torch is loaded).
The built-in measurements are found by module name (BUILTIN), as plugins are, on first use of the registry;
a user's own are named in the environment, HARNESS_MEASUREMENTS=module[:function],... (each module imported, then
its function called, if named, to register): a study's Ray workers inherit it, so a measurement defined outside
the harness runs in every trial.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.errors import UserError
from harness.metrics import Metric

# The built-in measurements, one module each; loaded (and so registered) the first time the registry is read.
# Their order is the order in which the hooks run and their settings are listed (the order the settings had as
# TrainConfig fields); a report orders its sections by each measurement's `section_rank`.
__all__ = ["BUILTIN", "Context", "Measurement", "Metric", "SectionContext", "register", "measurements"]

BUILTIN = ("harness.measure.agreement", "harness.measure.curve_bleu", "harness.measure.source_attention",
           "harness.measure.attention_stats", "harness.measure.length", "harness.measure.heads",
           "harness.measure.kv_int8", "harness.measure.grad_norms", "harness.measure.rope_pi")


@dataclass
class Context:
    """What a measurement's hook gets: the model with the weights to measure and what scoring them needs."""
    model: Any
    tokenizer: Any
    dev: Any                    # the dev split (harness/data/corpus.Split)
    lang: str                   # the target language (the tokenized BLEU's Moses rules)
    data_cfg: Any               # harness/data/corpus.DataConfig
    train: Any                  # harness/train/config.TrainConfig
    device: Any
    autocast: Callable
    out: Path | None = None     # the run directory (artifacts beside the weights; None: write nothing)
    clock: dict = field(default_factory=dict)    # tokens_seen, train_seconds so far
    step: int = 0
    rate_at: Callable[[int], float] | None = None    # the run's learning rate at an update (its schedule)


@dataclass
class SectionContext:
    """What a measurement's report section gets."""
    runs: Any                   # the study's runs (pandas DataFrame, MLflow's search_runs)
    rows: list                  # the rows to show, in the report's order
    uri: str                    # the MLflow store
    out_dir: Path               # where the report and its PNGs go
    study: str                  # the report's stem


Hook = Callable[[Context, Any], dict]
Section = Callable[[SectionContext], "tuple[list[str], list[Path]]"]


@dataclass(frozen=True)
class Measurement:
    name: str
    settings: type
    doc: str
    metrics: tuple[Metric, ...] = ()
    check: Callable[[Any, Any, Any], None] | None = None    # check(settings, model_cfg, data_cfg)
    at_init: Hook | None = None
    at_eval: Hook | None = None
    eval_at_last: bool = False
    at_end: Hook | None = None
    section: Section | None = None
    on: Callable[[Any], bool] | None = None     # whether settings take the measurement (default: not the defaults)
    section_rank: int = 100     # where its report section goes among the others' (lower first; ties: registration)
    # The most of each setting a smoke run (a study's rows for two steps, tests/test_studies.py) measures with:
    # {field: at most}, e.g. {"sentences": 4}; a setting at 0 (not measured) stays 0.
    smoke: dict = dataclasses.field(default_factory=dict)

    def takes(self, settings) -> bool:
        return self.on(settings) if self.on is not None else settings != self.default()

    def keys(self) -> dict[str, str]:
        """{`train.` key: settings field}, e.g. {"curve_bleu_sentences": "sentences"}."""
        return {f"{self.name}_{f.name}": f.name for f in dataclasses.fields(self.settings)}

    def field_types(self) -> dict[str, Any]:
        hints = typing.get_type_hints(self.settings)
        return {key: hints[name] for key, name in self.keys().items()}

    def default(self):
        return self.settings()


_REGISTRY: dict[str, Measurement] = {}
_loaded = False


def register(m: Measurement) -> Measurement:
    """Add a measurement; its name must be new, and its settings' keys must not collide with another's."""
    if not dataclasses.is_dataclass(m.settings) or not m.settings.__dataclass_params__.frozen:
        raise TypeError(f"measurement {m.name}: settings must be a frozen dataclass")
    if m.name in _REGISTRY and _REGISTRY[m.name] is not m:
        raise ValueError(f"measurement {m.name} is registered already")
    taken = {k for other in _REGISTRY.values() if other.name != m.name for k in other.keys()}
    if taken & set(m.keys()):
        raise ValueError(f"measurement {m.name}: settings {sorted(taken & set(m.keys()))} belong to another")
    _REGISTRY[m.name] = m
    return m


def unregister(name: str) -> None:
    """Remove a measurement (a test's toy one)."""
    _REGISTRY.pop(name, None)


def measurements() -> tuple[Measurement, ...]:
    """Every registered measurement, the built-in ones first, in registration order."""
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)
        for entry in filter(None, (e.strip() for e in os.environ.get(ENV, "").split(","))):
            _load_plugin(entry)
    return tuple(_REGISTRY.values())


ENV = "HARNESS_MEASUREMENTS"


def _load_plugin(entry: str) -> None:
    module, _, function = entry.partition(":")
    try:
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    except (ImportError, AttributeError, TypeError) as err:
        raise UserError(f"{ENV} names {entry!r}, which could not be loaded ({err}); give module[:function] "
                        "entries, comma-separated, that register measurements.") from None


def get(name: str) -> Measurement:
    for m in measurements():
        if m.name == name:
            return m
    raise UserError(f"no measurement {name!r}; the measurements are {', '.join(m.name for m in measurements())}.")


def setting_keys() -> dict[str, tuple[Measurement, str]]:
    """Every measurement setting as a `train.` key: {key: (measurement, field)}."""
    return {key: (m, name) for m in measurements() for key, name in m.keys().items()}


def field_types() -> dict[str, Any]:
    return {key: t for m in measurements() for key, t in m.field_types().items()}


def validate(m: Measurement, settings) -> None:
    """A measurement's settings checked: whole numbers are not negative; then the settings' own `validate`."""
    hints = typing.get_type_hints(m.settings)
    for key, name in m.keys().items():
        value = getattr(settings, name)
        if hints[name] is int and value < 0:
            raise UserError(f"train setting {key} must not be negative, got {value}.")
    if hasattr(settings, "validate"):
        settings.validate()


def claim_metrics() -> dict[str, tuple[str, str | None]]:
    """The claims.yaml metric keys the measurements feed: {key: (MLflow metric, transform)}."""
    return {x.claim: (x.claim_key or x.name, x.transform) for m in measurements() for x in m.metrics if x.claim}


def by_section_rank() -> list[Measurement]:
    """The measurements in the order a report shows their sections."""
    return sorted(measurements(), key=lambda m: m.section_rank)


def measured(measures: list, when: str, context: Callable[[], Context]) -> dict:
    """The metrics of the measurements (harness/measure) that run `when` (at_init, at_eval, at_end), in the
    registry's order; context() makes what their hooks read."""
    out: dict = {}
    for m, settings in measures:
        hook = getattr(m, when)
        if hook is not None:
            out.update(hook(context(), settings))
    return out
