"""`python -m harness status STUDY`: where a study's latest invocation stands, read back from MLflow, from any
terminal and while it runs or after it stopped (a study that runs for hours in the background, with --quiet, or
on a cluster): each trial's state, its step against its budget, its dev PPL now and its best, how many
evaluations the patience rule has waited for a better one, how each finished trial ended; the study's wall time
summed over its invocations, the finished trials' CPU-hours, whether its driver is alive, the time left, and the
command that continues it.

The trials are the study file's as `run` resolves them now (profile, --set), matched to the invocation's child
runs by trial key; a child run whose configuration hash differs from its trial's ran other settings, and
`--resume` would train it again."""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections import Counter
from pathlib import Path

from harness.metrics import ending_step, ending_words, run_ending
from harness.study import progress
from harness.study.kinds import KINDS, load_study
from harness.study.spec import Study
from harness.trial import Trial

# The driver logs its wall time once a minute (runner._Heartbeat) and a running trial its loss every few seconds:
# a study neither has been heard from for longer has stopped.
ALIVE_S = 180


def _alive(parent_status: str, heard_ms: int | None, now_s: float) -> bool:
    """An invocation still runs: its parent run is open and it was heard from within ALIVE_S."""
    return parent_status == "RUNNING" and heard_ms is not None and now_s - heard_ms / 1000 < ALIVE_S


def trial_state(trial: Trial, seen: dict | None, driver_alive: bool) -> dict:
    """One trial's line: its state, step, budget, dev PPL now and best, evaluations since the best against the
    patience, and how it ended."""
    budget = trial.train.steps if trial.train is not None else None       # a probe trial trains nothing
    patience = trial.train.patience if trial.train is not None else 0
    out = {"trial": trial.key, "row": trial.row, "seed": trial.seed, "state": "pending", "step": 0,
           "budget": budget, "dev_ppl": None, "best": None, "best_step": None, "since_best": None,
           "patience": patience, "end": "", "ended": "", "minutes": None}
    if seen is None:
        return out
    m, curve = seen["metrics"], seen["dev_ppl"]
    state = seen["status"].lower()
    if seen["config_hash"] and seen["config_hash"] != trial.config_hash:
        state = "changed"
    elif state == "running" and not driver_alive:
        state = "stopped"         # its driver died without closing it (SIGKILL, a lost machine)
    finished = state == "finished"
    step = int(m["steps"]) if seen["status"] == "FINISHED" and "steps" in m else seen["step"]
    out.update(state=state, step=step, minutes=m["train_seconds"] / 60 if "train_seconds" in m else None)
    if curve:
        points = [(s, v) for s, v in curve if s <= step or not finished]
        best_step, best = min(points or curve, key=lambda p: (p[1], p[0]))
        out.update(dev_ppl=points[-1][1] if points else None, best=best, best_step=best_step,
                   since_best=sum(1 for s, _ in points if s > best_step))
    if state == "failed" and seen.get("reason"):
        out["ended"] = seen["reason"].splitlines()[0][:100]
    if finished:            # its final figures: the scored (averaged) weights, and the rule's own best
        out["dev_ppl"] = m.get("dev_ppl", out["dev_ppl"])
        if "best_step" in m and "best_dev_ppl" in m:
            out.update(best=m["best_dev_ppl"], best_step=int(m["best_step"]))
        if trial.train is not None:
            out["end"], out["ended"] = ending(m, step)
    return out


def ending(m: dict, step: int) -> tuple[str, str]:
    """How a finished trial ended, from its final metrics, read as the report reads them (metrics.run_ending):
    (one of metrics.ENDINGS or "fixed steps"; the words for it)."""
    how = run_ending(m) or "fixed steps"
    return how, ending_words(how, ending_step(m, how, step), int(m.get("best_step", 0)))


def study_status(study: Study, snapshot: dict, now_s: float | None = None) -> dict:
    """The status of `study`'s trials in `snapshot` (logged.study_snapshot): a dict `render` prints and
    --json dumps."""
    parent = snapshot["parent"]
    now_s = time.time() if now_s is None else now_s
    beat = parent["last_heard_ms"]
    alive = _alive(parent["status"], beat, now_s)
    # a slice (`run --slices`) leaves out the trials other slices' records held when it started: not its own
    held = sorted(k for k in str(parent.get("held", "")).split(",") if k and k not in snapshot["trials"])
    study = dataclasses.replace(study, trials=[t for t in study.trials if t.key not in held])
    lines = [trial_state(t, snapshot["trials"].get(t.key), alive) for t in study.trials]
    count = dict(Counter(line["state"] for line in lines))
    finished = [snapshot["trials"][t.key] for t, line in zip(study.trials, lines) if line["state"] == "finished"]
    cpu = sum(f["metrics"].get("cpu_seconds", 0.0) for f in finished) / 3600
    left = None
    running = count.get("running", 0)
    if alive and running:
        kind = KINDS[study.kind]
        per_step = {t.key: kind.estimated_flops(t) / max(1, t.train.steps if t.train else 1) for t in study.trials}
        seen = {t.key: {"status": line["state"].upper(), "step": line["step"],
                        "train_seconds": snapshot["trials"][t.key]["metrics"].get("train_seconds", 0.0),
                        "start": snapshot["trials"][t.key]["start"], "end": snapshot["trials"][t.key]["end"]}
                for t, line in zip(study.trials, lines) if t.key in snapshot["trials"]}
        left = progress.time_left(study.trials, per_step, seen, running)
    return {"study": study.name, "version": study.version, "profile": study.profile, "path": study.path,
            "run_id": parent["run_id"], "parent_status": parent["status"], "ran_version": parent["version"],
            "driver_alive": alive, "last_heard_s_ago": None if beat is None else max(0.0, now_s - beat / 1000),
            "wall_hours": None if parent["wall_seconds"] is None else parent["wall_seconds"] / 3600,
            "cpu_hours_finished": cpu, "counts": count, "seconds_left": left, "command": parent["command"],
            "trials": lines, "held": held}


def resume_command(status: dict) -> str:
    """The command that continues the invocation: the one that started it, with --resume."""
    command = status["command"] or f"python -m harness run {status['path']} --profile {status['profile']}"
    return command if " --resume" in command else f"{command} --resume"


def _fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _trial_cells(line: dict) -> list[str]:
    waited = (f"{line['since_best']} of {line['patience']}" if line["patience"] else str(line["since_best"])) \
        if line["since_best"] is not None and line["state"] != "finished" else "-"
    best = f"{line['best']:.2f} ({line['best_step']})" if line["best"] is not None else "-"
    steps = f"{line['step']} / {line['budget']}" if line["budget"] is not None else "-"
    return [line["trial"], line["state"], steps, _fmt(line["dev_ppl"]), best, waited,
            _fmt(line["minutes"], ".0f"), line["ended"]]


def render(status: dict) -> str:
    """The status as the terminal shows it: a header, a table of trials and a closing line."""
    head = [f"{status['study']} v{status['version']}, profile {status['profile']}: MLflow run {status['run_id']}"
            + (f" (`{status['command']}`)" if status["command"] else "")]
    if status["ran_version"] and status["ran_version"] != str(status["version"]):
        head.append(f"  (that invocation ran version {status['ran_version']} of {status['path']}; this file is "
                    f"version {status['version']})")
    header = ["trial", "state", "step / budget", "dev PPL", "best (step)", "evals since best", "train min", "ended"]
    rows = [header] + [_trial_cells(line) for line in status["trials"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    counts = ", ".join(f"{n} {state}" for state, n in sorted(status["counts"].items(), key=lambda kv: -kv[1]))
    ends = Counter(line["end"] for line in status["trials"] if line["end"])
    said = {"rule": "stopped by the rule", "budget": "at the budget", "time limit": "by the time limit",
            "diverged": "diverged", "fixed steps": "ran fixed steps"}
    n = len(status["trials"])
    tail = [f"{n} trial{'s' * (n != 1)}: {counts}"
            + (f"; of the finished, {', '.join(f'{n} {said[how]}' for how, n in ends.items())}" if ends else ""),
            f"wall time over all invocations: {_fmt(status['wall_hours'], '.2f', 'not logged')}"
            f"{' h' if status['wall_hours'] is not None else ''}; CPU-hours of the finished trials: "
            f"{status['cpu_hours_finished']:.2f}"]
    if status.get("held"):
        tail.append(f"held by other slices' records, so not this invocation's: {', '.join(status['held'])}")
    ran = len(status["trials"]) - status["counts"].get("pending", 0)
    if ran and status["counts"].get("changed", 0) == ran:
        tail.append("every trial that ran did so under other settings than this study file gives now: give the "
                    "--set the invocation ran with (its command above), or the file has changed since")
    tail.append(_liveness(status))
    return "\n".join(head + table + tail)


def _liveness(status: dict) -> str:
    """Whether the driver runs, the time left, or what continues the study."""
    unfinished = len(status["trials"]) - status["counts"].get("finished", 0)
    if status["driver_alive"]:
        left = status["seconds_left"]
        # Under the patience rule a trial may stop long before its budget: the estimate is then a ceiling.
        ceiling = any(line["patience"] for line in status["trials"] if line["state"] != "finished")
        return (f"running (last heard from {status['last_heard_s_ago']:.0f} s ago)"
                + (f"; {'at most ' if ceiling else ''}about {left / 3600:.1f} h left at "
                   f"{status['counts'].get('running', 0)} trial(s) at a time"
                   + (" (every trial to its step budget; the patience rule may stop them sooner)" if ceiling else "")
                   if left is not None else ""))
    if not unfinished:
        return "every trial finished: `python -m harness report --study " \
               f"{status['study']} --profile {status['profile']}` writes its report"
    why = {"RUNNING": "its driver stopped without closing the run (killed, or its machine lost)",
           "KILLED": "interrupted"}.get(status["parent_status"], status["parent_status"].lower())
    return f"not running ({why}); `{resume_command(status)}` continues it (trials resume from their checkpoints)"


def to_json(status: dict) -> str:
    return json.dumps(status, indent=1, default=str)


def as_ran(path: str | Path, profile: str | None, rows: str, seeds: str, sets: dict | None = None) -> Study:
    """The study file resolved with the rows and seeds an invocation ran (its parent run's params, comma-separated;
    empty: the study's own)."""
    study = load_study(path, profile, sets=sets)
    picked = [r for r in rows.split(",") if r]
    numbers = [int(x) for x in seeds.split(",") if x]
    if (picked and picked != study.rows) or (numbers and numbers != study.seeds):
        study = load_study(path, profile, picked or None, numbers or None, sets=sets)
    return study


def _trials(entry: dict) -> list[Trial] | None:
    """The invocation's trials, from its study file as it is now with the rows and seeds it ran (None: the file
    is gone or no longer resolves)."""
    path = Path(entry["study_file"])
    if not entry["study_file"] or not path.is_file():
        return None
    try:
        return as_ran(path, entry["profile"] or None, entry["rows"], entry["seeds"]).trials
    except Exception:         # noqa: BLE001 - a study file changed since: the count is then unknown, not an error
        return None


def overview(entries: list[dict], now_s: float | None = None) -> str:
    """One line for the latest invocation of each study, profile and name in the store (logged.invocations):
    its state, its trials finished of all, and when it started."""
    now_s = time.time() if now_s is None else now_s
    rows = [["study", "profile", "name", "state", "trials", "started"]]
    for e in entries:
        beat = e["last_heard_ms"]
        alive = _alive(e["status"], beat, now_s)
        state = ("running" if alive else "stopped (driver gone)" if e["status"] == "RUNNING" else
                 "interrupted" if e["status"] == "KILLED" else e["status"].lower())
        trials_now = _trials(e)
        if trials_now is None:            # no study file to match against: the child runs as the store holds them
            finished, total = sum(1 for _, _, st in e["children"] if st == "FINISHED"), "?"
        else:                             # only runs of its trials as the file gives them now, as `status STUDY`
            wanted = {(t.key, t.config_hash) for t in trials_now}
            finished = sum(1 for key, h, st in e["children"] if st == "FINISHED" and (key, h) in wanted)
            total = str(len(trials_now))
        c = Counter(st for _, _, st in e["children"])
        trials = f"{finished} of {total} finished" \
            + (f", {c['RUNNING']} running" if alive and c.get("RUNNING") else "") \
            + (f", {c['FAILED']} failed" if c.get("FAILED") else "")
        started = datetime.datetime.fromtimestamp(e["started"] / 1000).strftime("%Y-%m-%d %H:%M")
        rows.append([e["study"], e["profile"], e["name"] or "-", state, trials, started])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + ["`python -m harness status STUDY --profile P [--name NAME]` shows one invocation's "
                              "trials"])
