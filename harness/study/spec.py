"""Study files: YAML -> a validated, fully resolved list of trials (one per row and seed), before anything starts.

A study names its table, a base, its rows (overrides of the base, in the paper's units), seeds, resources
and profiles. A profile scales a study without copying it: `scale` multiplies chosen fields of every row
(so the rows' relations survive, e.g. d_k = d_model / h in the A rows), then its own settings apply.
Resolution order for a row: preset -> base -> the profile's changes to the base (`profiles.<name>.base`,
which rows may still override, e.g. checkpoint averaging in Table 3's tiny profile) -> row -> profile scale
-> profile settings -> the profile's own overrides of that row (`profiles.<name>.rows`, e.g. the D rows'
smaller training set) -> `run --set`. A profile may run only some of the study's rows
(`profiles.<name>.only_rows`, e.g. a profile for a setting some rows cannot run in; or all but its `skip_rows`);
`--rows` then chooses
among those.
Everything wrong is refused here with the file, the key and what is allowed (UserError, exit 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from harness import overrides
from harness.errors import UserError, suggest
from harness.io import load_yaml
from harness.paper import load_tables
from harness.trial import Trial

TOP_KEYS = {"study", "version", "kind", "table", "description", "seeds", "max_failures", "resources", "base",
            "rows", "profiles"}
# What a trial does. train: a model trained and evaluated (Tables 2, 3 and 4; parsing is a data task).
# scaling: one layer type timed over n and d (Table 1), settings from harness/probes/scaling_spec.ScalingSpec.
BASE_KEYS = {"preset", "model", "train", "data"}
PROFILE_KEYS = {"description", "include", "preset", "scale", "model", "train", "data", "resources", "requires",
                "seeds", "row_seeds", "base", "rows", "only_rows", "skip_rows", "departure_notes"}
PROBE_BASE_KEYS = {"probe"}
PROBE_PROFILE_KEYS = {"description", "probe", "resources", "requires"}
RESOURCE_KEYS = {f.name for f in dataclasses.fields(overrides.Resources)}   # cpu, gpu per worker; workers
REQUIRE_KEYS = {"gpu", "data"}


@dataclass(frozen=True)
class Study:
    path: Path
    name: str
    version: int
    table: str | None
    profile: str
    rows: list[str]
    seeds: list[int]
    max_failures: int
    resources: dict
    requires: dict
    trials: list[Trial] = field(default_factory=list)
    kind: str = "train"
    # departures from the paper (or the published run a profile reproduces) that no setting shows, e.g. a
    # different BPE tool: the profile's `departure_notes`, printed with the departures in every report
    departure_notes: list[str] = field(default_factory=list)
    # every row the profile runs, in the study file's order, whichever --rows chose (a slice's record keeps it)
    all_rows: list[str] = field(default_factory=list)


class Checker:
    """Error messages that always name the file and the key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, what: str) -> None:
        raise UserError(f"{self.path}: {where}: {what}")

    def mapping(self, value: Any, where: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(where, f"must be a mapping of key: value, got {type(value).__name__}.")
        return value

    def keys(self, value: dict, where: str, allowed: set[str]) -> None:
        for key in value:
            if key not in allowed:
                self.fail(f"{where}.{key}" if where else str(key),
                          f"unknown key{suggest(key, allowed)}; allowed: {', '.join(sorted(allowed))}.")

    def integer(self, value: Any, where: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(where, f"must be an integer >= {minimum}, got {value!r}.")
        return value


def section_overrides(chk: Checker, values: dict, where: str, section: str | None) -> dict[str, dict]:
    """Flat or sectioned key: value pairs -> {'model': {...}, 'train': {...}, 'data': {...}}, type-checked."""
    out: dict[str, dict] = {s: {} for s in overrides.SECTIONS}
    for key, value in values.items():
        qualified = f"{section}.{key}" if section else str(key)
        try:
            sec, name = overrides.resolve_key(qualified)
            out[sec][name] = overrides.check_value(qualified, value, sec, name)
        except UserError as err:
            chk.fail(f"{where}.{key}", str(err))
    return out


@dataclass(frozen=True)
class Selection:
    """What the user picked from a study file: a profile (None: tiny, else the first), rows and seeds (None: all
    the profile runs, its seeds) and `run --set` (overrides.parse_sets: laid over every row after the profile)."""
    profile: str | None = None
    rows: list[str] | None = None
    seeds: list[int] | None = None
    sets: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyFile:
    """A study file read and its top level checked, the part every kind shares; its kind's loader
    (harness/study/kinds.py) resolves the rest. head: the Study fields known so far."""
    chk: "Checker"
    raw: dict
    head: dict
    seeds: list[int]

    @property
    def path(self) -> Path:
        return self.chk.path


def read_yaml_file(path: Path):
    """A study file's YAML, or one sentence saying what is wrong with its text (not UTF-8, not YAML, a key twice)."""
    try:
        return load_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; save the study file as UTF-8.") from None
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML: {_yaml_problem(err)}.") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's problem, where, and what it was parsing, on one line ("expected ',' or ']', but got ':' at line 8,
    column 6 (while parsing a flow sequence begun at line 7, column 10)"): str(err) spreads them over lines."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if not problem:                                  # a ReaderError (a control character): its own words, joined
        return " ".join(str(err).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context, began = getattr(err, "context", None), getattr(err, "context_mark", None)
    since = f" begun at line {began.line + 1}, column {began.column + 1}" if began is not None else ""
    return f"{problem}{where}" + (f" ({context}{since})" if context else "")


def read_study_file(path: str | Path, kinds) -> StudyFile:
    """The YAML file, its top-level keys, name, version, table, seeds, max_failures and kind (one of `kinds`)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"study file {path} does not exist; give a study's name (table3) or its YAML file "
                        "(studies/table3.yaml).")
    raw = read_yaml_file(path)
    chk = Checker(path)
    raw = chk.mapping(raw, "top level")
    chk.keys(raw, "", TOP_KEYS)
    for key in ("study", "version", "base", "rows", "profiles"):
        if key not in raw:
            chk.fail(key, "is required.")
    name = raw["study"]
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        chk.fail("study", f"must be a name of letters, digits, - and _, got {name!r}.")
    version = chk.integer(raw["version"], "version", 1)
    table = raw.get("table")
    if table is not None and table not in load_tables():
        chk.fail("table", f"{table!r} is not a table of harness/paper/tables.yaml"
                          f"{suggest(table, load_tables())}.")
    study_seeds = raw.get("seeds", [0])
    if not isinstance(study_seeds, list) or not study_seeds:
        chk.fail("seeds", f"must be a non-empty list of integers, got {study_seeds!r}.")
    study_seeds = [chk.integer(s, "seeds", 0) for s in study_seeds]
    max_failures = chk.integer(raw.get("max_failures", 0), "max_failures", 0)
    kind = raw.get("kind", "train")
    if kind not in kinds:
        chk.fail("kind", f"unknown kind {kind!r}{suggest(kind, kinds)}; allowed: {', '.join(kinds)}.")
    head = dict(path=path, name=name, version=version, table=table, max_failures=max_failures, kind=kind)
    return StudyFile(chk, raw, head, study_seeds)


def checked_rows(file: StudyFile) -> dict:
    """The study's `rows`: a non-empty mapping of row name -> settings."""
    all_rows = file.chk.mapping(file.raw["rows"], "rows")
    if not all_rows:
        file.chk.fail("rows", "must name at least one row.")
    return all_rows


def profile_overrides(chk: Checker, prof: dict, where: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """A profile's scale factors and its settings, each by section (model, train, data)."""
    scale = chk.mapping(prof.get("scale"), f"{where}.scale")
    factors: dict[str, dict] = {sec: {} for sec in overrides.SECTIONS}
    for key, factor in scale.items():
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
            chk.fail(f"{where}.scale.{key}", f"must be a positive number, got {factor!r}.")
        try:
            sec, field_name = overrides.resolve_key(str(key))
        except UserError as err:
            chk.fail(f"{where}.scale.{key}", str(err))
        factors[sec][field_name] = factor
    prof_over = {sec: section_overrides(chk, chk.mapping(prof.get(sec), f"{where}.{sec}"), f"{where}.{sec}", sec)[sec]
                 for sec in overrides.SECTIONS}
    return factors, prof_over


def profile_rows(chk: Checker, prof: dict, where: str, all_rows: dict) -> list[str]:
    """The rows a profile runs, in the study's order: its `only_rows` (a non-empty list of the study's rows),
    else all of them but its `skip_rows` (rows that would train exactly as another row in this profile)."""
    if "only_rows" in prof and "skip_rows" in prof:
        chk.fail(f"{where}.skip_rows", "give only_rows or skip_rows, not both.")
    if "skip_rows" in prof:
        skip = prof["skip_rows"]
        if not isinstance(skip, list):
            chk.fail(f"{where}.skip_rows", f"must be a list of the study's rows, got {skip!r}.")
        for r in skip:
            known_row(chk, r, f"{where}.skip_rows", all_rows)
        kept = [str(r) for r in all_rows if r not in skip]
        if not kept:
            chk.fail(f"{where}.skip_rows", "leaves no row to run.")
        return kept
    if "only_rows" not in prof:
        return [str(r) for r in all_rows]
    only = prof["only_rows"]
    if not isinstance(only, list) or not only:
        chk.fail(f"{where}.only_rows", f"must be a non-empty list of the study's rows, got {only!r}.")
    for r in only:
        known_row(chk, r, f"{where}.only_rows", all_rows)
    return [str(r) for r in all_rows if r in only]


def known_row(chk: Checker, row, where: str, all_rows: dict) -> None:
    """A profile's reference to a row (rows, only_rows, skip_rows) must name one of the study's rows."""
    if row not in all_rows:
        chk.fail(where, f"{row!r} names no row of the study{suggest(str(row), all_rows)}; its rows: "
                        f"{', '.join(map(str, all_rows))}.")


def profile_seeds(chk: Checker, prof: dict, where: str, study_seeds: list[int]) -> list[int]:
    """A profile's own default seeds (e.g. three where every claim needs an interval), else the study's."""
    if "seeds" not in prof:
        return study_seeds
    if not isinstance(prof["seeds"], list) or not prof["seeds"]:
        chk.fail(f"{where}.seeds", f"must be a non-empty list of integers, got {prof['seeds']!r}.")
    return [chk.integer(x, f"{where}.seeds", 0) for x in prof["seeds"]]


def profile_row_seeds(chk: Checker, prof: dict, where: str, rows: list[str], seeds: list[int]) -> dict[str, list[int]]:
    """A profile's `row_seeds: {row: [seeds]}`: rows that run only some of the profile's seeds (a row no claim
    needs an interval of, where three seeds would cost too much); --seeds overrides it."""
    out = {}
    spec = prof.get("row_seeds", {})
    if not isinstance(spec, dict):
        chk.fail(f"{where}.row_seeds", f"must map rows to lists of seeds, got {spec!r}.")
    for row, value in spec.items():
        if row not in rows:
            chk.fail(f"{where}.row_seeds.{row}", f"is not a row of the study; its rows: {', '.join(rows)}.")
        if not isinstance(value, list) or not value:
            chk.fail(f"{where}.row_seeds.{row}", f"must be a non-empty list of integers, got {value!r}.")
        out[row] = [chk.integer(x, f"{where}.row_seeds.{row}", 0) for x in value]
        if not set(out[row]) <= set(seeds):
            chk.fail(f"{where}.row_seeds.{row}", f"must be some of the profile's seeds {seeds}, got {value!r}.")
    return out


def scaled(value, factor):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(1, round(value * factor))
    return value * factor


def pick_profile(chk: Checker, raw: dict, profile: str | None) -> tuple[str, dict]:
    profiles = chk.mapping(raw["profiles"], "profiles")
    if not profiles:
        chk.fail("profiles", "must define at least one profile (e.g. paper and tiny).")
    profile = profile or ("tiny" if "tiny" in profiles else next(iter(profiles)))
    if profile not in profiles:
        raise UserError(f"{chk.path} has no profile {profile!r}{suggest(profile, profiles)}; "
                        f"its profiles: {', '.join(profiles)}.")
    return profile, included(chk, chk.mapping(profiles[profile], f"profiles.{profile}"), f"profiles.{profile}")


def included(chk: Checker, prof: dict, where: str, seen: tuple[Path, ...] = ()) -> dict:
    """A profile with its `include: FILE:PROFILE` resolved: the named profile of another study file (FILE
    relative to this one; it may include in turn) is the start, and this profile's own settings are laid
    over it section by section (scale, model, train, data, resources, requires: key by key; the rest whole).
    The included profile's `rows`, `only_rows`, `skip_rows` and `row_seeds` are left behind: they name rows of the
    other study."""
    if "include" not in prof:
        return prof
    ref = prof["include"]
    file, _, name = str(ref).rpartition(":")
    target = (chk.path.parent / file).resolve()
    if not file or not name:
        chk.fail(f"{where}.include", f"must be FILE:PROFILE (e.g. table3.yaml:tiny), got {ref!r}.")
    if target in seen or target == chk.path.resolve():
        chk.fail(f"{where}.include", f"{ref!r} includes itself.")
    if not target.is_file():
        chk.fail(f"{where}.include", f"{file} does not exist next to {chk.path.name}.")
    other = read_yaml_file(target)
    sub = Checker(target)
    profiles = sub.mapping(sub.mapping(other, "top level").get("profiles"), "profiles")
    if name not in profiles:
        chk.fail(f"{where}.include", f"{file} has no profile {name!r}{suggest(name, profiles)}.")
    merged = dict(included(sub, sub.mapping(profiles[name], f"profiles.{name}"), f"profiles.{name}",
                            (*seen, chk.path.resolve())))
    merged.pop("rows", None)    # a profile's overrides of single rows belong to its own study's rows
    merged.pop("only_rows", None)
    merged.pop("skip_rows", None)
    merged.pop("row_seeds", None)
    for key, value in prof.items():
        if key == "include":
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def pick_rows(path: Path, all_rows: dict, rows: list[str] | None) -> list[str]:
    chosen = list(all_rows) if not rows else rows
    for r in chosen:
        if r not in all_rows:
            raise UserError(f"{path} has no row {r!r}{suggest(r, all_rows)}; its rows: {', '.join(all_rows)}.")
    return chosen


def resources(chk: Checker, raw: dict, prof: dict, where: str, sets: dict | None = None) -> tuple[dict, dict]:
    """What each trial takes: the defaults (overrides.Resources), the study's `resources:`, the profile's, then
    `run --set resources.KEY=V`; and what the profile requires."""
    resources = {**dataclasses.asdict(overrides.Resources()), **chk.mapping(raw.get("resources"), "resources"),
                 **chk.mapping(prof.get("resources"), f"{where}.resources"), **(sets or {})}
    chk.keys(resources, "resources", RESOURCE_KEYS)
    for key, value in resources.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            chk.fail(f"resources.{key}", f"must be a number >= 0, got {value!r}.")
    if not isinstance(resources["workers"], int) or resources["workers"] < 1:
        chk.fail("resources.workers", f"must be a whole number of data-parallel workers >= 1, got "
                                      f"{resources['workers']!r}.")
    requires = chk.mapping(prof.get("requires"), f"{where}.requires")
    chk.keys(requires, f"{where}.requires", REQUIRE_KEYS)
    return resources, requires


@dataclass(frozen=True)
class ProbeLayers:
    """A probe study's settings read layer by layer (base.probe, each row, the profile's probe), with what the
    runner needs of the profile: the kinds whose rows are probe settings (scaling, inference) share this."""
    profile: str
    base: dict
    rows: dict[str, dict]
    profile_probe: dict
    needs: dict
    requires: dict
    chosen: list[str]
    seeds: list[int]


def probe_layers(file: StudyFile, sel: Selection, settings: Callable[[Checker, dict, str], dict]) -> ProbeLayers:
    """Read a probe study's layers (settings(chk, values, where) checks each) and its profile's resources; refuse
    `--set` (such a study has no model, train or data settings) and more than one worker (a probe times one
    process)."""
    chk, raw, kind = file.chk, file.raw, file.head["kind"]
    if any(v for sec, v in sel.sets.items() if sec != "resources"):
        raise UserError(f"--set changes model, train and data settings, and {file.path} is a {kind} study without "
                        "them; change its probe settings in the study file instead (resources.* it takes).")
    base = chk.mapping(raw["base"], "base")
    chk.keys(base, "base", {"probe"})
    base_probe = settings(chk, chk.mapping(base.get("probe"), "base.probe"), "base.probe")
    all_rows = checked_rows(file)
    rows = {str(r): settings(chk, chk.mapping(v, f"rows.{r}"), f"rows.{r}") for r, v in all_rows.items()}
    profile, prof = pick_profile(chk, raw, sel.profile)
    where = f"profiles.{profile}"
    chk.keys(prof, where, {"description", "probe", "resources", "requires"})
    prof_probe = settings(chk, chk.mapping(prof.get("probe"), f"{where}.probe"), f"{where}.probe")
    needs, requires = resources(chk, raw, prof, where, sel.sets.get("resources"))
    if needs["workers"] != 1:
        chk.fail("resources.workers", f"must be 1 for a {kind} study: its probe times one process.")
    return ProbeLayers(profile, base_probe, rows, prof_probe, needs, requires, pick_rows(file.path, all_rows, sel.rows),
                       sel.seeds if sel.seeds else file.seeds)



def probe_settings(chk: Checker, values: dict, where: str, fields: list[str]) -> dict:
    """A probe row's settings checked against `fields` (an unknown key is one sentence, with a suggestion), lists
    made tuples (the specs are frozen and hashed)."""
    for key in values:
        if key not in fields:
            chk.fail(f"{where}.{key}", f"unknown probe setting{suggest(key, fields)}; allowed: {', '.join(fields)}.")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def load_probe_study(file: StudyFile, sel: Selection, settings: Callable[[Checker, dict, str], dict],
                     build: Callable[[dict, dict, dict], Any], kind: str) -> Study:
    """A study whose rows are probe settings: base.probe -> row -> profile.probe, each row's spec made by
    build(base, row, profile) (it raises TypeError or ValueError for settings it refuses), a trial a seed."""
    chk = file.chk
    layers = probe_layers(file, sel, settings)
    trials = []
    for r in layers.chosen:
        try:
            spec = build(layers.base, layers.rows[r], layers.profile_probe)
        except (TypeError, ValueError) as err:
            chk.fail(f"rows.{r} (profile {layers.profile})", f"{err}".rstrip(".") + ".")
        trials += [Trial(row=r, seed=s, kind=kind, probe=spec) for s in layers.seeds]
    return Study(**file.head, profile=layers.profile, rows=layers.chosen, seeds=layers.seeds, resources=layers.needs,
                 requires=layers.requires, trials=trials)