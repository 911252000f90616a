"""Study kinds, one registry: a kind is one module of harness/study/ and one line of KINDS below.

A kind module has what the file, the driver and the trial need of it:
- `load(StudyFile, Selection) -> Study`: its rows read from the study file and resolved into trials;
- `print_trials(study, timing)`: `run --dry-run`, one line a trial;
- `prepare(trials)`: in the driver, before any trial starts (e.g. the corpus and BPE, once);
- `estimated_flops(trial)`: orders the trials, longest first;
- `summary_columns(metrics)`: the (header, metric) columns printed after the study;
- `params(trial)`: the trial's MLflow params; `run(trial, out_dir, run, ranks)`: its body, which returns
  (metrics, summary), as harness/trial.py's run_trial calls it (ranks other than 0 get run None);
- `probe_type`: the frozen dataclass of a probe row's settings (Trial.probe), or None;
- `smoke(trial, cache_dir) -> (Trial, expect)`: the trial shrunk to run in seconds, and what its result must show
  ({metric: (low, high), or the name of a metric it equals}): every study's smoke test runs each kind alike.
The runner looks a kind up here instead of branching on its name; `kind:` in a study file names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from harness.study import kind_inference, kind_scaling, kind_statement, kind_train
from harness.study.spec import Selection, Study, StudyFile, read_study_file
from harness.trial import Trial


@dataclass(frozen=True)
class StudyKind:
    name: str
    load: Callable[[StudyFile, Selection], Study]
    print_trials: Callable[..., None]
    prepare: Callable[[list[Trial]], None]
    estimated_flops: Callable[[Trial], float]
    summary_columns: Callable[[list[dict]], list[tuple[str, str]]]
    params: Callable[[Trial], dict]
    run: Callable[..., tuple[dict, str]]
    probe_type: type | None
    smoke: Callable[[Trial, Path], tuple[Trial, dict]]
    explain: Callable | None = None       # `show STUDY ROW`: (file, selection, row) -> [(key, value, source)]

    @classmethod
    def of(cls, name: str, module: ModuleType) -> "StudyKind":
        """The kind a module defines (its functions of the names above)."""
        return cls(name, *(getattr(module, f) for f in ("load", "print_trials", "prepare", "estimated_flops",
                                                         "summary_columns", "params", "run", "probe_type",
                                                         "smoke")), explain=getattr(module, "explain", None))


KINDS = {
    "train": StudyKind.of("train", kind_train),        # Tables 2, 3 and 4: a model trained and evaluated
    "scaling": StudyKind.of("scaling", kind_scaling),  # Table 1: one layer type timed over n and d
    "inference": StudyKind.of("inference", kind_inference),   # a model shape timed at inference (prefill, decode)
    "statement": StudyKind.of("statement", kind_statement),   # a statement of the paper's text measured (§3-4)
}


def load_study(path: str | Path, profile: str | None = None, rows: list[str] | None = None,
               seeds: list[int] | None = None, sets: dict[str, dict] | None = None) -> Study:
    """The study file resolved into trials. rows and seeds select (None: all rows, the profile's seeds);
    sets (overrides.parse_sets of `run --set`) is laid over every row after the profile."""
    file = read_study_file(path, KINDS)
    sets = {sec: dict(v) for sec, v in (sets or {}).items() if v}
    return KINDS[file.head["kind"]].load(file, Selection(profile, rows, seeds, sets))
