"""`python -m harness run STUDY`: a study's trials (row x seed) as a Ray Tune grid; the only module that
imports ray. A local Ray by default; --address or RAY_ADDRESS joins an existing cluster.

MLflow is the source of truth for what is done: `--resume` reopens the latest invocation of the same study,
profile and version, skips trials whose child run FINISHED with the same config hash, and reruns the
rest in the same run directory, where each trial continues from its own last checkpoint and reopens its
own child run. FIFO scheduling (no early stopping): every row trains the same budget, as in the paper.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness import overrides, record
from harness.data.sources import prepare_command
from harness.errors import UserError
from harness.io import check_writable
from harness.logged import HELD_TAG, VARIANT_TAG, slice_reads, tracking_uri
from harness.probes.cost import training_costs
from harness.study import progress
from harness.study.departures import departures_tag
from harness.study.estimate import Timing
from harness.study.kinds import KINDS, load_study
from harness.study.spec import Study
from harness.system import git_state, hardware_tags, versions
from harness.tracking import StudyTracking, share_view
from harness.trial import Trial, spec_key


def paper_tags(study: Study) -> dict[str, str]:
    """What a study's report needs from the model core, computed here and kept in the parent run, so that
    reports read MLflow and the paper only: for Table 2, the paper rows' counted training costs."""
    return {"paper_costs": json.dumps(training_costs())} if study.table == "table2" else {}


def _check_requirements(study: Study) -> None:
    for trial in study.trials:
        name = trial.data.name if trial.data else "synth"
        if name != "synth" and not Path(name).is_dir():
            what = "tree directory" if trial.data.task == "parse" else "data directory"
            raise UserError(f"profile {study.profile} of {study.path} needs the {what} {name}, which does not exist; "
                            f"prepare it with `{prepare_command(Path(name), trial.data.task)}`, or run --profile "
                            "tiny.")


def _check_ray_address(address: str) -> None:
    """ray.init keeps retrying an address where nothing listens (minutes): try the port once, quickly."""
    import socket
    if address == "auto" or address.startswith("local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or auto; check --address / "
                        "RAY_ADDRESS.")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise UserError(f"cannot join Ray at {address}: nothing answers on {host}:{port} "
                        f"({err.strerror or type(err).__name__}); check --address / RAY_ADDRESS.") from None


def _trainable(config: dict) -> None:
    from ray import tune

    from harness.study.kinds import KINDS
    from harness.study.parallel import with_node
    from harness.trial import run_trial
    tune.report(run_trial(config["trial"], with_node(config["ctx"]), KINDS[config["trial"]["kind"]]))


def _placement(study: Study, cluster: dict, gpu: float, n_trials: int, ctx: dict):
    """What one trial asks of the cluster and how many run at once: (trainable, its bundle, ctx, concurrency).

    One worker: the trial is the worker, `cpu` CPUs (its torch threads) and `gpu` GPUs. N workers: the
    trial is a Ray Train driver with a bundle of its own (DRIVER_CPU), and its N workers take `cpu` and
    `gpu` each in a placement group of their own, which Ray grants all at once or not at all. Concurrency
    counts both, so that no trial waits for workers the cluster cannot place (Ray would wait forever)."""
    workers = int(study.resources.get("workers", 1))
    cpu_total, gpu_total = float(cluster.get("CPU", 1)), float(cluster.get("GPU", 0))
    if workers == 1:
        cpu = min(max(1, int(study.resources.get("cpu", 1))), max(1, int(cpu_total)))
        concurrency = max(1, min(n_trials, int(cpu_total // cpu)))
        if gpu:
            concurrency = max(1, min(concurrency, int(gpu_total // gpu)))
        return _trainable, {"cpu": cpu, "gpu": gpu}, {**ctx, "threads": cpu}, concurrency
    from harness.study.parallel import DRIVER_CPU, trainable
    cpu = float(study.resources.get("cpu", 1))
    need_cpu = workers * cpu + DRIVER_CPU
    fits = [int(cpu_total // need_cpu)] + ([int(gpu_total // (workers * gpu))] if gpu else [])
    if min(fits) < 1:
        have = f"{cpu_total:g} CPUs" + (f" and {gpu_total:g} GPUs" if gpu else "")
        raise UserError(f"a trial of {study.path} needs {workers} workers x {cpu:g} CPUs"
                        + (f" x {gpu:g} GPUs" if gpu else "") + f" plus {DRIVER_CPU} CPU for its driver, and the "
                        f"Ray cluster has {have}; lower resources.workers or resources.cpu (e.g. 0.9).")
    dp = {"workers": workers, "cpu": cpu, "gpu": gpu, "max_failures": study.max_failures}
    ctx = {**ctx, "threads": max(1, round(cpu)), "data_parallel": dp}
    return trainable, {"cpu": DRIVER_CPU}, ctx, max(1, min(n_trials, *fits))


class _Silent:
    """The live view's stand-in under --quiet: trial lines still print, nothing is polled."""
    def say(self, line: str) -> None:
        print(line, flush=True)

    def stop(self) -> None:
        pass


def _live_view(study: Study, todo: list[Trial], ctx: dict, concurrency: int, args: StudyRequest):
    """The driver's live view of the study (harness/study/progress.py), read back from MLflow."""
    if args.quiet:
        return _Silent()
    from harness.logged import trial_progress
    from harness.study.progress import StudyProgress
    kind = KINDS[study.kind]
    per_step = {t.key: kind.estimated_flops(t) / max(1, (t.train.steps if t.train else 1)) for t in todo}
    poll = lambda: trial_progress(ctx["uri"], ctx["experiment_id"], ctx["parent_id"])  # noqa: E731
    return StudyProgress(todo, per_step, concurrency, poll).start()


def quiet_libraries(verbose: bool) -> None:
    """Ray's and MLflow's own banners and INFO lines reach the user only with --verbose."""
    import logging
    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")     # the legacy reporter is silent at verbose=0
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _summary(tracking: StudyTracking, parent_id: str, study: Study) -> tuple[int, int]:
    runs = {r.data.tags.get("trial_key"): r for r in tracking.children(parent_id)}
    metrics = [r.data.metrics for r in runs.values()]
    columns = KINDS[study.kind].summary_columns(metrics)
    print(f"\n{'trial':<18}{'status':<10}" + "".join(f"{h:>10}" for h, _ in columns) + f"{'minutes':>9}")
    done = failed = 0
    for t in study.trials:
        run = runs.get(t.key)
        if run is None:
            print(f"{t.key:<18}{'NOT RUN':<10}")
            continue
        m, status = run.data.metrics, run.info.status
        done += status == "FINISHED"
        failed += status == "FAILED"
        cells = "".join(f"{m[k]:>10.2f}" if k in m else f"{'-':>10}" for _, k in columns)
        minutes = (m["train_seconds"] + m.get("eval_seconds", 0)) / 60 if "train_seconds" in m else \
            (run.info.end_time - run.info.start_time) / 6e4 if run.info.end_time else float("nan")
        print(f"{t.key:<18}{status:<10}{cells}{minutes:>9.2f}")
    return done, failed


def overhead_account(results: list[dict], wall: float, concurrency: int) -> dict:
    """Where the trial slots' time (wall x concurrency) went. From each trial's start and end (wall clock):
    - work: trials' own time (data, training, evaluation), their MLflow calls excluded;
    - waiting: slot-seconds left empty while trials were still waiting to start (Ray starting and
      scheduling actors, importing torch in workers): overhead;
    - driver: wall time outside [first trial start, last trial end] (Ray start/stop, the parent run,
      the summary), on every slot: overhead;
    - tail: slot-seconds left empty after the last trial started, because no trial was left to run:
      a matter of packing rows onto slots, reported apart from the overhead."""
    if not results or wall <= 0:
        return {"work": 0.0, "waiting": 0.0, "mlflow": 0.0, "driver": wall, "overhead_share": 1.0 if wall else 0.0,
                "tail_share": 0.0}
    spans = sorted((r["started_at"], r["ended_at"]) for r in results)
    first, last_start, last_end = spans[0][0], max(s for s, _ in spans), max(e for _, e in spans)
    edges = sorted({first, last_start, *(t for span in spans for t in span if first <= t <= last_start)})
    waiting = 0.0
    for a, b in zip(edges, edges[1:]):
        running = sum(1 for s, e in spans if s <= a and e >= b)
        waiting += max(0, concurrency - running) * (b - a)
    tail = sum(max(0.0, last_end - e) for s, e in spans[-concurrency:]) if len(spans) >= concurrency else 0.0
    mlflow = sum(r.get("mlflow_seconds", 0.0) for r in results)
    work = sum(r["trial_seconds"] for r in results) - mlflow
    driver = max(0.0, wall - (last_end - first))
    slots = wall * concurrency
    return {"work": work, "waiting": waiting, "mlflow": mlflow, "driver": driver,
            "overhead_share": (waiting + mlflow + driver * concurrency) / slots, "tail_share": tail / slots}


@dataclass(frozen=True)
class StudyRequest:
    """What `python -m harness run` asks for, typed: the CLI builds one from its arguments (`from_args`), and a
    Python user (a notebook) builds one directly and calls `run_study(request)`:

        from harness.study.runner import StudyRequest, run_study
        run_study(StudyRequest("studies/table3.yaml", profile="tiny", rows=("base", "A1"), seeds=(0,),
                               sets={"train.steps": 200}))

    The trials, their metrics and artifacts go to MLflow (MLFLOW_TRACKING_URI, else ./mlflow.db) and runs_dir;
    `python -m harness report` (or harness.report.writers.report_all) writes the reports from there."""
    study: str | Path
    profile: str | None = None          # None: tiny where the study has it
    rows: Sequence[str] | None = None   # None: every row
    seeds: Sequence[int] | None = None  # None: the profile's seeds
    # settings laid over every row: {"train.steps": 200, "d_model": 64} or ["train.steps=200", ...] (--set)
    sets: Mapping[str, Any] | Sequence[str] = ()
    dry_run: bool = False               # print the resolved trials and their cost, run nothing
    tflops: float = 0.0                 # dry run: a device's rate for the time estimate
    measure: bool = False               # dry run: time one update of each row here
    devices: int = 1                    # dry run: devices the estimate spreads the trials over
    name: str = ""                      # an invocation of its own beside the profile's main one
    resume: bool = False                # continue the latest invocation; finished trials are kept
    address: str | None = None          # a Ray cluster to join (default: RAY_ADDRESS, else a local Ray)
    runs_dir: str | Path = "runs/studies"
    quiet: bool = False                 # no live view
    verbose: bool = False               # Ray's and MLflow's own banners too
    command: str = field(default="", compare=False)   # as typed (the CLI's); "" : written out from the request
    # a slice of the study: skip the trials the slice records in this folder hold and write this invocation's
    # record there as each trial finishes; SLICES_HERE: reports/[PROFILE/][NAME/]STUDY.slices
    slices: str | Path | None = None

    @classmethod
    def from_args(cls, args) -> "StudyRequest":
        """The request the CLI's arguments make (--rows a,b and --seeds 0,1 split; --set kept as typed)."""
        rows, seeds = _selection(args)
        return cls(args.study, args.profile, rows, seeds, tuple(args.set), args.dry_run, args.tflops, args.measure,
                   args.devices, getattr(args, "name", "") or "", args.resume, args.address, args.runs_dir,
                   getattr(args, "quiet", False), getattr(args, "verbose", False),
                   " ".join(["python -m harness"] + [shlex.quote(a) for a in sys.argv[1:]]),
                   getattr(args, "slices", None))

    def parsed_sets(self) -> dict[str, dict]:
        """`sets` by section, typed (overrides.parse_sets)."""
        if isinstance(self.sets, Mapping):
            return overrides.parse_sets([f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                                         for k, v in self.sets.items()], overrides.RUN_SECTIONS)
        return overrides.parse_sets([self.sets] if isinstance(self.sets, str) else list(self.sets),
                                    overrides.RUN_SECTIONS)

    def command_line(self) -> str:
        """The command that makes this request, for the parent run's provenance."""
        if self.command:
            return self.command
        parts = ["python -m harness run", str(self.study)]
        if self.profile:
            parts += ["--profile", self.profile]
        if self.rows:
            parts += ["--rows", ",".join(self.rows)]
        if self.seeds is not None:
            parts += ["--seeds", ",".join(map(str, self.seeds))]
        sets = self.sets.items() if isinstance(self.sets, Mapping) else \
            (s.split("=", 1) for s in ([self.sets] if isinstance(self.sets, str) else self.sets))
        for key, value in sets:
            parts += ["--set", f"{key}={value}"]
        parts += [flag for flag, on in (("--resume", self.resume), ("--quiet", self.quiet)) if on]
        if self.slices is not None:
            parts += ["--slices"] + ([str(self.slices)] if str(self.slices) != SLICES_HERE else [])
        parts += [f"--name {self.name}"] * bool(self.name) + [f"--address {self.address}"] * bool(self.address)
        return " ".join(shlex.quote(p) if " " not in p else p for p in parts)


def run_study(request: StudyRequest) -> int:
    """Run (or, dry, cost) the study the request names; the exit status: 0 when every trial finished."""
    args = request
    quiet_libraries(args.verbose)
    study = load_study(args.study, args.profile, list(args.rows) if args.rows else None,
                       list(args.seeds) if args.seeds is not None else None, sets=args.parsed_sets())
    timing = Timing(tflops=args.tflops, measure=args.measure, devices=args.devices)
    if (timing.wanted or args.devices != 1) and not args.dry_run:
        raise UserError("--tflops, --measure and --devices estimate a study's time: give them with --dry-run.")
    if args.tflops < 0 or args.devices < 1:
        raise UserError("--tflops must be a positive rate (TFLOP/s per device) and --devices at least 1.")
    if args.dry_run:         # before the requirements: a paper profile can be costed without its GPUs or data
        print(f"{study.path}: study {study.name} v{study.version}, profile {study.profile}, "
              f"{len(study.trials)} trials ({len(study.rows)} rows, seeds {','.join(map(str, study.seeds))})")
        KINDS[study.kind].print_trials(study, timing)
        return 0
    _check_requirements(study)
    uri = tracking_uri()
    check_writable(Path(args.runs_dir).resolve(), "--runs-dir", "give a writable directory with --runs-dir",
                   keep=False)
    if args.address or os.environ.get("RAY_ADDRESS"):
        _check_ray_address(args.address or os.environ["RAY_ADDRESS"])
    tracking = StudyTracking(uri, study.name)
    name = args.name
    parent = tracking.latest_parent(study.profile, study.version, name) if args.resume else None
    if parent is not None:
        _backfill_finished(tracking, parent)
    todo = _todo(tracking, study, parent, args.resume)
    folder = slices_folder(study, name, args.slices) if args.slices is not None else None
    held: set[str] = set()
    if folder is not None and todo:
        kept = _not_held(todo, study, name, folder)
        held = {t.key for t in todo} - {t.key for t in kept}   # this invocation's trials are the rest
        study, todo = dataclasses.replace(study, trials=[t for t in study.trials if t.key not in held]), kept
        if not todo and parent is None:
            return 0
    if not todo:
        _summary(tracking, parent.info.run_id, study)
        return 0
    kind = KINDS[study.kind]
    t_start = time.perf_counter()            # the wall time counts the data's preparation (BPE, a first corpus)
    kind.prepare(todo)                       # data first, once in the driver
    prep_seconds = time.perf_counter() - t_start
    sha, dirty = git_state()
    tags = {"study": study.name, "version": study.version, "profile": study.profile, "git_sha": sha,
            "git_dirty": dirty, "mlflow.source.git.commit": sha, **hardware_tags(), **versions(),
            **({VARIANT_TAG: name} if name else {})}
    parent_id, run_dir = _open_parent(tracking, study, parent, tags, str(args.runs_dir), len(todo),
                                      args.command_line())
    tracking.log_prepare_seconds(parent_id, prep_seconds, 0 if parent is None else
                                 int(parent.data.tags.get("resume_count", "0")) + 1)
    # Breadth first: every row's first seed, then every row's second, ..., so that a study cut short has a whole
    # table and gains its intervals last. Within a seed, longest first (by estimated FLOPs): the big row then
    # overlaps the small ones instead of running alone at the end while the other slots idle.
    rank = {seed: i for i, seed in enumerate(study.seeds)}
    todo = sorted(todo, key=lambda t: (rank.get(t.seed, len(rank)), -kind.estimated_flops(t)))
    _SLICE_WRITERS[:] = [] if folder is None else [_SliceWriter(uri, parent_id, study, name, folder)]
    if held:
        tracking.tag_parent(parent_id, {HELD_TAG: ",".join(sorted(held))})
    invocation = 0 if parent is None else int(parent.data.tags.get("resume_count", "0")) + 1
    try:
        if parent is not None:
            _start_changed_afresh(tracking, parent_id, run_dir, todo)
        with _Heartbeat(tracking, parent_id, invocation, t_start):
            results, interrupted, concurrency, ray_seconds = _fit(study, todo, run_dir, {
                "uri": uri, "experiment_id": tracking.experiment_id, "parent_id": parent_id, "run_dir": str(run_dir),
                "cwd": str(Path.cwd()), "tags": tags}, args)
    except UserError:           # Ray could not start or has no GPUs: leave no run behind
        if parent is None:
            tracking.discard_parent(parent_id)
        else:
            tracking.end_parent(parent_id, "KILLED", {}, {})
        raise
    return _close(tracking, parent_id, study, results, interrupted, concurrency, ray_seconds,
                  time.perf_counter() - t_start, name, prep_seconds)


SLICES_HERE = "here"      # `run --slices` without a folder: the study's own, beside its report


def slices_folder(study: Study, name: str, given: str | Path) -> Path:
    """Where a slice's record goes and the records of the study's other slices are: the folder given, else
    reports/[PROFILE/][NAME/]STUDY.slices beside the report they assemble into (the main profile's at the top)."""
    if str(given) != SLICES_HERE:
        return Path(given)
    folder = Path("reports") / ("." if study.profile in ("tiny", "") else study.profile)
    return (folder / name if name else folder) / f"{study.name}.slices"


def _not_held(todo: list[Trial], study: Study, name: str, folder: Path) -> list[Trial]:
    """The trials no slice record in `folder` holds (the same row, seed and configuration hash, finished): the rest
    of a study continued on a machine that has only the committed records, no store and no checkpoints."""
    held: dict[tuple[str, int], tuple[str, str]] = {}
    for path in sorted(folder.glob(f"*{record.SLICE_SUFFIX}")) if folder.is_dir() else []:
        rec = record.load(path)
        if not rec.matches(study.name, study.profile, name):
            raise UserError(f"{path} is a slice of study {rec.study}, profile {rec.profile}"
                            f"{f', name {rec.variant}' if rec.variant else ''}, not of this one; give --slices a "
                            "folder of this study's slices.")
        for _, run in record.finished(rec.reads.results["runs"]).iterrows():
            row, seed, digest = record.identity(run)
            held.setdefault((row, seed), (digest, path.name))
    keep, skipped = [], []
    for t in todo:
        digest, where = held.get((t.row, t.seed), ("", ""))
        if digest == t.config_hash:
            skipped.append(t.key)
            continue
        if digest:
            print(f"{t.key}: {folder / where} holds it under configuration hash {digest}, and the study now gives "
                  f"{t.config_hash}: it runs again, and that slice will not assemble with this one until its record "
                  "of the trial is removed")
        keep.append(t)
    if skipped:
        print(f"{study.path}: {len(skipped)} of {len(todo)} trials already held by the slice records in {folder} "
              f"(skipped: {', '.join(skipped)}); {len(keep)} to run")
    if not keep:
        print(f"{study.path}: nothing to run; `python -m harness report --record {folder}/*{record.SLICE_SUFFIX}` "
              "assembles the report")
    return keep


class _SliceWriter:
    """Writes a slice's record (record.slice_name in its folder) from the store: after each trial finishes and when
    the invocation ends, so that a machine lost mid-slice costs only the trials that were running on it."""

    def __init__(self, uri: str, parent_id: str, study: Study, name: str, folder: Path):
        self.uri, self.parent_id, self.name, self.folder = uri, parent_id, name, folder
        self.study, self.rows = study.name, study.all_rows or study.rows

    def write(self) -> Path | None:
        try:
            reads = slice_reads(self.uri, self.parent_id, self.rows)
            if reads is None:
                return None
            self.folder.mkdir(parents=True, exist_ok=True)
            path = record.save(self.folder / record.slice_name(reads.results["parent"]), reads, self.study, self.name)
        except Exception as err:  # noqa: BLE001 - the study goes on; the next finished trial writes it again
            progress.say(f"  warning: the slice record in {self.folder} could not be written "
                         f"({type(err).__name__}: {str(err)[:160]}); the next finished trial tries again")
            return None
        progress.say(f"  slice record: {path}")
        return path


_SLICE_WRITERS: list[_SliceWriter] = []     # this driver's (a module global: Tune pickles its callbacks)


def _write_slice() -> None:
    for writer in _SLICE_WRITERS:
        writer.write()


def _selection(args) -> tuple[list[str] | None, list[int] | None]:
    """--rows and --seeds as lists (None: the study's own)."""
    seeds = parse_seeds(args.seeds) if args.seeds else None
    return ([r.strip() for r in args.rows.split(",")] if args.rows else None), seeds


def parse_seeds(text: str) -> list[int]:
    """--seeds: seeds and ranges separated by commas ("0,1,2", "0-9", "0-2,7"), each seed once, in order."""
    seeds = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        try:
            lo, hi = int(first), int(last if sep else first)
        except ValueError:
            lo, hi = 0, -1
        if not first or lo > hi:
            raise UserError(f"--seeds {text!r} must be non-negative integers or ranges separated by commas, "
                            "e.g. 0,1,2 or 0-9.")
        seeds += range(lo, hi + 1)
    if len(set(seeds)) < len(seeds):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        raise UserError(f"--seeds {text!r} names seed {', '.join(map(str, twice))} more than once; give each once.")
    return seeds


def _todo(tracking: StudyTracking, study: Study, parent, resume: bool) -> list[Trial]:
    """The trials to run: all of them, or on --resume those whose child run did not FINISH with the same
    config hash (none left: says so)."""
    if parent is None:
        if resume:
            print(f"{study.path}: no earlier invocation of profile {study.profile} found; starting afresh.")
        return study.trials
    finished = {r.data.tags.get("trial_key"): r.data.tags.get("config_hash")
                for r in tracking.children(parent.info.run_id) if r.info.status == "FINISHED"}
    todo = [t for t in study.trials if finished.get(t.key) != t.config_hash]
    if not todo:
        print(f"{study.path}: all {len(study.trials)} trials of profile {study.profile} already finished "
              f"(MLflow run {parent.info.run_id}); nothing to run.")
    return todo


def _backfill_finished(tracking: StudyTracking, parent) -> None:
    """--resume: each finished trial's rows that its MLflow run lacks are sent from its metrics.jsonl (an attempt
    killed with a dev evaluation unsent, and resumed past it by code that re-sent training rows only)."""
    run_dir = Path(parent.data.tags.get("run_dir", ""))
    for child in tracking.children(parent.info.run_id):
        key = child.data.tags.get("trial_key", "")
        jsonl = run_dir / key / "metrics.jsonl"
        if child.info.status != "FINISHED" or not key or not jsonl.is_file():
            continue
        try:
            sent = tracking.backfill_finished(child.info.run_id, jsonl)
        except Exception as err:  # noqa: BLE001 - best effort: an unreadable row or a refusing store must not stop --resume
            print(f"{key}: its metrics.jsonl's rows could not be checked against its MLflow run "
                  f"({type(err).__name__}: {str(err)[:160]}); the study goes on")
            continue
        if sent:
            print(f"{key}: {sent} row(s) of its metrics.jsonl that its MLflow run lacked sent")


def _live_worker(folder: Path) -> int | None:
    """The pid of a live Ray worker that a trial's folder names (worker.pid, worker.rankN.pid), else None."""
    for pid_file in folder.glob("worker*.pid") if folder.is_dir() else []:
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"ray::" in cmdline:          # a recycled pid of some other program is not the trial's worker
            return pid
    return None


def _start_changed_afresh(tracking: StudyTracking, parent_id: str, run_dir: Path, todo: list[Trial]) -> None:
    """--resume after a row's settings changed in the study file: each such trial starts afresh. Its old child run
    (another config hash) is superseded (tagged, then deleted in MLflow) and its directory kept beside, renamed,
    so that neither its checkpoints (another config's weights) nor its MLflow run (another config's params) is
    taken for the new trial's."""
    wanted = {t.key: t.config_hash for t in todo}
    for child in tracking.children(parent_id):
        key, old = child.data.tags.get("trial_key", ""), child.data.tags.get("config_hash", "")
        if key not in wanted or not old or old == wanted[key]:
            continue
        busy = _live_worker(run_dir / key)
        if busy:
            raise UserError(f"{run_dir / key} is in use by process {busy} (another invocation of this study still "
                            "running?): stop it before resuming, since the trial's settings changed and its folder "
                            "would be set aside.")
        tracking.supersede(child.info.run_id, f"config hash {old} -> {wanted[key]}: its resolved settings changed "
                                              "(the study file, a --set or a default)")
        folder, kept = run_dir / key, run_dir / f"{key}.superseded-{old}"
        moved = ""
        if folder.exists():
            n = 1
            while kept.exists():
                kept, n = run_dir / f"{key}.superseded-{old}-{n}", n + 1
            folder.rename(kept)
            moved = f", its directory kept as {kept.name}"
        print(f"{key}: its resolved settings changed since it ran (the study file, a --set or a default: config "
              f"hash {old} -> {wanted[key]}); it starts afresh "
              f"(the old MLflow run {child.info.run_id} deleted{moved})")


class _Heartbeat:
    """Logs this invocation's wall time to the parent run once a minute and at the end, so that a study run
    across sessions, each invocation killed with its session, still sums its wall time (the report's)."""

    def __init__(self, tracking: StudyTracking, parent_id: str, invocation: int, t_start: float,
                 every: float = 60.0):
        self.tracking, self.parent_id, self.invocation, self.t_start = tracking, parent_id, invocation, t_start
        self.every, self.stop = every, threading.Event()
        self.thread = threading.Thread(target=self._beat, name="study-heartbeat", daemon=True)

    def _log(self) -> None:
        try:
            self.tracking.log_invocation_wall(self.parent_id, time.perf_counter() - self.t_start, self.invocation)
        except Exception:      # noqa: BLE001 - a store that hiccups must not stop the study; the next beat retries
            pass

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            self._log()

    def __enter__(self) -> "_Heartbeat":
        self._log()               # at once: `status` hears from a study from its start, not a minute later
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self._log()


def _open_parent(tracking: StudyTracking, study: Study, parent, tags: dict, runs_dir: str,
                 n_todo: int, command: str) -> tuple[str, Path]:
    """The study's parent run, started afresh or reopened (--resume), and its run directory."""
    if parent is None:
        run_dir = Path(runs_dir).resolve() / f"{study.name}-{study.profile}-{int(time.time())}"
        parent_id = tracking.start_parent(
            f"{study.name} {study.profile}",
            {**tags, "command": command,
             "started": datetime.datetime.now().isoformat(timespec="seconds"), "run_dir": run_dir,
             "study_file": study.path, "table": study.table or "", **paper_tags(study), **departures_tag(study)},
            {"rows": ",".join(study.rows), "seeds": ",".join(map(str, study.seeds))})
        print(f"study {study.name} v{study.version}, profile {study.profile}: {n_todo} trials; MLflow run "
              f"{parent_id} at {tracking.uri}")
        return parent_id, run_dir
    parent_id = parent.info.run_id
    run_dir = Path(parent.data.tags["run_dir"])
    check_writable(run_dir, "the resumed study's run directory", "give a writable directory with --runs-dir")
    tracking.reopen_parent(parent_id, int(parent.data.tags.get("resume_count", "0")) + 1, command, tags)
    print(f"resuming {study.name} (MLflow run {parent_id}): {n_todo} of {len(study.trials)} trials left")
    return parent_id, run_dir


def _close(tracking: StudyTracking, parent_id: str, study: Study, results: list[dict], interrupted: bool,
           concurrency: int, ray_seconds: float, wall: float, name: str = "", prep_seconds: float = 0.0) -> int:
    """Account for the time, end the parent run (KILLED when interrupted, FAILED when a trial failed) and
    say what to do next; the exit status. `wall` counts the data's preparation (`prep_seconds`), which the
    overhead account leaves out: it is the study's work, done once in the driver before any trial."""
    done, failed = _summary(tracking, parent_id, study)
    try:
        return _closed(tracking, parent_id, study, results, interrupted, concurrency, ray_seconds, wall, name,
                       prep_seconds, done, failed)
    finally:
        _write_slice()          # with the invocation's end: its status, wall time and every finished trial


def _closed(tracking: StudyTracking, parent_id: str, study: Study, results: list[dict], interrupted: bool,
            concurrency: int, ray_seconds: float, wall: float, name: str, prep_seconds: float, done: int,
            failed: int) -> int:
    cost = overhead_account(results, wall - prep_seconds, concurrency)
    print(f"\nwall {wall:.1f} s (data preparation {prep_seconds:.1f} s), {concurrency} trial(s) at a time; "
          f"trials' own work {cost['work']:.1f} s; "
          f"Ray start and stop {ray_seconds:.1f} s; Ray + MLflow overhead {100 * cost['overhead_share']:.1f} % "
          f"of the slots' time (slots idle while trials waited {cost['waiting']:.1f} s, MLflow in trials "
          f"{cost['mlflow']:.1f} s, driver outside trials {cost['driver']:.1f} s); slots idle after the last "
          f"trial started (bin packing, not overhead) {100 * cost['tail_share']:.1f} %")
    if interrupted:
        tracking.mark_unfinished(parent_id)
        tracking.end_parent(parent_id, "KILLED", {}, {"interrupted": "true"})
        print(f"interrupted: rerun with `python -m harness run {study.path} --profile {study.profile}"
              f"{f' --name {name}' if name else ''} --resume` (and the same --set, --rows and --seeds)")
        return 130
    tracking.end_parent(parent_id, "FINISHED" if not failed else "FAILED",
                        {"wall_seconds": wall, "work_seconds": cost["work"],
                         "overhead_share": cost["overhead_share"], "tail_idle_share": cost["tail_share"],
                         **tracking.row_headlines(parent_id)},
                        {"n_trials": len(study.trials), "n_failed": failed})
    print(f"{done} of {len(study.trials)} trials finished, {failed} failed; "
          f"`python -m harness report --study {study.name} --profile "
          f"{study.profile}{f' --name {name}' if name else ''}` "
          f"writes reports/{'' if study.profile == 'tiny' else study.profile + '/'}{name + '/' if name else ''}"
          f"{study.name}.md")
    view = share_view(tracking.uri, parent_id)
    print(f"browse: `mlflow ui --backend-store-uri {tracking.uri}`, then http://127.0.0.1:5000/{view} (the runs "
          f"table, this invocation's trials under its parent run; after `report`, the parent run's description "
          f"is the report)")
    return 0 if not failed else 1


def _fit(study: Study, todo: list[Trial], run_dir: Path, ctx: dict,
         args: StudyRequest) -> tuple[list[dict], bool, int, float]:
    import logging

    import ray
    from ray import tune

    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")   # trials keep the driver's working directory
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    # A local Ray listens on the loopback interface only; joining a cluster uses the cluster's addresses.
    local = {} if address else {"_node_ip_address": "127.0.0.1"}
    t0 = time.perf_counter()
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                 configure_logging=True, **local)
    except Exception as err:  # a wrong address, an unreachable cluster
        raise UserError(f"cannot start or join Ray (address {address or 'local'}): "
                        f"{str(err).splitlines()[0][:200]}; check --address / RAY_ADDRESS.") from None
    # SIGTERM (a scheduler, `kill`) stops the study the way Ctrl-C does: trials stop, the parent run is marked
    # KILLED and --resume finishes it. Installed after ray.init, whose own handler aborts the process.
    # (SIGKILL cannot be caught: --resume copes with what it leaves.)
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        cluster = ray.cluster_resources()
        gpu = float(study.resources.get("gpu", 0)) if cluster.get("GPU", 0) > 0 else 0.0
        if study.requires.get("gpu") and not gpu:
            raise UserError(f"profile {study.profile} of {study.path} needs GPUs but the Ray cluster has none; "
                            "join a GPU cluster with --address, or run --profile tiny.")
        trainable, bundle, ctx, concurrency = _placement(study, cluster, gpu, len(todo), ctx)
        ray_seconds = time.perf_counter() - t0

        # Tune pickles its callbacks: they reach the view (a thread, bars) through progress.say, by reference.
        view = progress.install(_live_view(study, todo, ctx, concurrency, args))

        class Progress(tune.Callback):
            def on_trial_complete(self, iteration, trials, trial, **info):
                r, key = trial.last_result, spec_key(trial.config["trial"])
                progress.say(f"  {key}: {r.get('summary', '')} ({r.get('trial_seconds', 0):.0f} s)")
                for line in filter(None, str(r.get("warnings") or "").splitlines()):
                    progress.say(f"  warning [{key}]: {line}")     # raised inside the trial (harness/trial.py)
                _write_slice()

            def on_trial_error(self, iteration, trials, trial, **info):
                progress.say(f"  {spec_key(trial.config['trial'])}: FAILED")

        name = lambda t: spec_key(t.config["trial"])  # noqa: E731
        tuner = tune.Tuner(
            tune.with_resources(trainable, bundle),
            param_space={"trial": tune.grid_search([t.to_dict() for t in todo]), "ctx": ctx},
            tune_config=tune.TuneConfig(reuse_actors=True, trial_name_creator=name, trial_dirname_creator=name,
                                        max_concurrent_trials=concurrency),
            run_config=tune.RunConfig(name="tune", storage_path=str(run_dir / "ray"), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=study.max_failures),
                                      callbacks=[Progress()]))
        try:
            grid = tuner.fit()
        except KeyboardInterrupt:
            return [], True, concurrency, ray_seconds
        finally:
            view.stop()
        results = [r.metrics for r in grid if r.metrics and "trial_seconds" in r.metrics]
        errors = sum(1 for r in grid if r.error is not None)
        t1 = time.perf_counter()
        ray.shutdown()
        return results, len(results) + errors < len(todo), concurrency, ray_seconds + time.perf_counter() - t1
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ray.is_initialized():
            ray.shutdown()
