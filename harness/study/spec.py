"""Study files: YAML -> a validated, fully resolved list of trials (one per row and seed), before anything starts.

A study names its table, a base, its rows (overrides of the base, in the paper's units), seeds, resources
and profiles. A profile scales a study without copying it: `scale` multiplies chosen fields of every row
(so the rows' relations survive, e.g. d_k = d_model / h in the A rows), then its own settings apply.
Resolution order for a row: preset -> base -> the profile's changes to the base (`profiles.<name>.base`,
which rows may still override, e.g. checkpoint averaging in Table 3's tiny profile) -> row -> profile scale
-> profile settings -> the profile's own overrides of that row (`profiles.<name>.rows`, e.g. the D rows'
smaller training set) -> `run --set`. A profile may run only some of the study's rows
(`profiles.<name>.only_rows`, e.g. a profile for a setting some rows cannot run in; or all but its `skip_rows`); `--rows` then chooses
among those.
Everything wrong is refused here with the file, the key and what is allowed (UserError, exit 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model import PRESETS, ConfigError, get_preset, with_settings
from model.family import to_dict

from harness import overrides
from harness.data.corpus import DataConfig
from harness.errors import UserError, suggest
from harness.paper import load_tables
from harness.probes.scaling_spec import ScalingSpec, scaling_fields
from harness.train import TRAIN_PRESETS
from harness.trial import Trial

TOP_KEYS = {"study", "version", "kind", "table", "description", "seeds", "max_failures", "resources", "base",
            "rows", "profiles"}
# What a trial does. train: a model trained and evaluated (Tables 2, 3 and 4; parsing is a data task).
# scaling: one layer type timed over n and d (Table 1), settings from harness/probes/scaling_spec.ScalingSpec.
BASE_KEYS = {"preset", "model", "train", "data"}
PROFILE_KEYS = {"description", "include", "preset", "scale", "model", "train", "data", "resources", "requires",
                "seeds", "base", "rows", "only_rows", "skip_rows"}
PROBE_BASE_KEYS = {"probe"}
PROBE_PROFILE_KEYS = {"description", "probe", "resources", "requires"}
RESOURCE_KEYS = {"cpu", "gpu", "workers"}   # cpu and gpu per worker; workers: data-parallel ranks
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


class _Checker:
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


def _section_overrides(chk: _Checker, values: dict, where: str, section: str | None) -> dict[str, dict]:
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


def load_study(path: str | Path, profile: str | None = None, rows: list[str] | None = None,
               seeds: list[int] | None = None, sets: dict[str, dict] | None = None) -> Study:
    """The study file resolved into trials. rows and seeds select (None: all rows, the profile's seeds);
    sets (overrides.parse_sets of `run --set`) is laid over every row after the profile."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"study file {path} does not exist; give a YAML file such as studies/table3.yaml.")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"{path} is not valid UTF-8 YAML ({str(err).splitlines()[0]}).") from None
    chk = _Checker(path)
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
    if kind not in LOADERS:
        chk.fail("kind", f"unknown kind {kind!r}{suggest(kind, LOADERS)}; allowed: {', '.join(LOADERS)}.")
    head = dict(path=path, name=name, version=version, table=table, max_failures=max_failures, kind=kind)
    sets = {sec: dict(v) for sec, v in (sets or {}).items() if v}
    return LOADERS[kind](chk, raw, head, study_seeds, profile, rows, seeds, sets)


def _load_train_study(chk: _Checker, raw: dict, head: dict, study_seeds: list[int], profile: str | None,
                      rows: list[str] | None, seeds: list[int] | None, sets: dict[str, dict]) -> Study:
    """A study whose rows are model/train/data overrides (kind train): preset -> base -> row -> profile."""
    path = head["path"]
    base = chk.mapping(raw["base"], "base")
    chk.keys(base, "base", BASE_KEYS)
    preset_name = base.get("preset", "paper_base")
    if preset_name not in PRESETS:
        chk.fail("base.preset", f"unknown preset {preset_name!r}{suggest(preset_name, PRESETS)}; "
                                f"choose one of {', '.join(PRESETS)}.")
    profile, prof = _pick_profile(chk, raw, profile)
    where = f"profiles.{profile}"
    chk.keys(prof, where, PROFILE_KEYS)
    prof_base = chk.mapping(prof.get("base"), f"{where}.base")
    chk.keys(prof_base, f"{where}.base", BASE_KEYS - {"preset"})
    base_over = {s: {} for s in overrides.SECTIONS}
    for sec in overrides.SECTIONS:
        for layer, at in ((base, "base"), (prof_base, f"{where}.base")):
            part = _section_overrides(chk, chk.mapping(layer.get(sec), f"{at}.{sec}"), f"{at}.{sec}", sec)
            base_over[sec].update(part[sec])

    all_rows = chk.mapping(raw["rows"], "rows")
    if not all_rows:
        chk.fail("rows", "must name at least one row.")
    row_over = {str(r): _section_overrides(chk, chk.mapping(v, f"rows.{r}"), f"rows.{r}", None)
                for r, v in all_rows.items()}
    if "preset" in prof:
        preset_name = prof["preset"]
        if preset_name not in PRESETS:
            chk.fail(f"{where}.preset", f"unknown preset {preset_name!r}{suggest(preset_name, PRESETS)}.")
    factors, prof_over = _profile_overrides(chk, prof, where)
    runs_rows = _profile_rows(chk, prof, where, all_rows)
    prof_rows = chk.mapping(prof.get("rows"), f"{where}.rows")
    for r in prof_rows:
        _known_row(chk, r, f"{where}.rows.{r}", all_rows)
    prof_row_over = {str(r): _section_overrides(chk, chk.mapping(v, f"{where}.rows.{r}"), f"{where}.rows.{r}", None)
                     for r, v in prof_rows.items()}
    if "seed" in sets.get("train", {}):
        raise UserError("--set train.seed is not accepted by `run`: choose the trials' seeds with --seeds, e.g. "
                        "--seeds 0,1,2.")
    resources, requires = _resources(chk, raw, prof, where)

    chosen = _pick_rows(path, all_rows, rows) if rows else runs_rows
    for r in chosen:
        if r not in runs_rows:
            which = "only_rows" if "only_rows" in prof else f"rows, skip_rows {', '.join(map(str, prof['skip_rows']))}"
            raise UserError(f"{path}: profile {profile} does not run row {r!r} (its {which}: "
                            f"{', '.join(runs_rows)}); choose one of those, or another profile.")
    chosen_seeds = seeds if seeds else _profile_seeds(chk, prof, where, study_seeds)

    trials = []
    for r in chosen:
        # the profile's settings, then its overrides of this row, then `run --set` (the last layer, every row)
        last = {sec: {**prof_over[sec], **prof_row_over.get(r, {}).get(sec, {}), **sets.get(sec, {})}
                for sec in overrides.SECTIONS}
        for seed in chosen_seeds:
            try:
                trials.append(_resolve(preset_name, base_over, row_over[r], factors, last, seed))
            except (ConfigError, UserError, TypeError) as err:
                chk.fail(f"rows.{r} (profile {profile}{', with --set' if sets else ''})", str(err))
            trials[-1] = dataclasses.replace(trials[-1], row=r)
    return Study(**head, profile=profile, rows=chosen, seeds=chosen_seeds, resources=resources,
                 requires=requires, trials=trials)


def _profile_overrides(chk: _Checker, prof: dict, where: str) -> tuple[dict[str, dict], dict[str, dict]]:
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
    prof_over = {sec: _section_overrides(chk, chk.mapping(prof.get(sec), f"{where}.{sec}"), f"{where}.{sec}", sec)[sec]
                 for sec in overrides.SECTIONS}
    return factors, prof_over


def _profile_rows(chk: _Checker, prof: dict, where: str, all_rows: dict) -> list[str]:
    """The rows a profile runs, in the study's order: its `only_rows` (a non-empty list of the study's rows),
    else all of them but its `skip_rows` (rows that would train exactly as another row in this profile)."""
    if "only_rows" in prof and "skip_rows" in prof:
        chk.fail(f"{where}.skip_rows", "give only_rows or skip_rows, not both.")
    if "skip_rows" in prof:
        skip = prof["skip_rows"]
        if not isinstance(skip, list):
            chk.fail(f"{where}.skip_rows", f"must be a list of the study's rows, got {skip!r}.")
        for r in skip:
            _known_row(chk, r, f"{where}.skip_rows", all_rows)
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
        _known_row(chk, r, f"{where}.only_rows", all_rows)
    return [str(r) for r in all_rows if r in only]


def _known_row(chk: _Checker, row, where: str, all_rows: dict) -> None:
    """A profile's reference to a row (rows, only_rows, skip_rows) must name one of the study's rows."""
    if row not in all_rows:
        chk.fail(where, f"{row!r} names no row of the study{suggest(str(row), all_rows)}; its rows: "
                        f"{', '.join(map(str, all_rows))}.")


def _profile_seeds(chk: _Checker, prof: dict, where: str, study_seeds: list[int]) -> list[int]:
    """A profile's own default seeds (e.g. three where every claim needs an interval), else the study's."""
    if "seeds" not in prof:
        return study_seeds
    if not isinstance(prof["seeds"], list) or not prof["seeds"]:
        chk.fail(f"{where}.seeds", f"must be a non-empty list of integers, got {prof['seeds']!r}.")
    return [chk.integer(x, f"{where}.seeds", 0) for x in prof["seeds"]]


def _scaled(value, factor):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(1, round(value * factor))
    return value * factor


def _resolve(preset_name: str, base: dict, row: dict, factors: dict, prof: dict, seed: int) -> Trial:
    # with_settings: a row or profile may name another model family (`model.family`, model/family.py)
    model = with_settings(with_settings(get_preset(preset_name), **base["model"]), **row["model"])
    train = dataclasses.replace(TRAIN_PRESETS[preset_name], **{**base["train"], **row["train"]})
    data = dataclasses.replace(DataConfig(), **{**base["data"], **row["data"]})
    model = with_settings(model, **{k: _scaled(getattr(model, k), f) for k, f in factors["model"].items()})
    train = dataclasses.replace(train, **{k: _scaled(getattr(train, k), f) for k, f in factors["train"].items()})
    data = dataclasses.replace(data, **{k: _scaled(getattr(data, k), f) for k, f in factors["data"].items()})
    model = with_settings(model, **prof["model"])
    train = dataclasses.replace(train, **prof["train"], seed=seed)
    train.validate()
    data = dataclasses.replace(data, **prof["data"])
    return Trial(row="", seed=seed, model=to_dict(model), train=dataclasses.asdict(train),
                 data=dataclasses.asdict(data))


def _pick_profile(chk: _Checker, raw: dict, profile: str | None) -> tuple[str, dict]:
    profiles = chk.mapping(raw["profiles"], "profiles")
    if not profiles:
        chk.fail("profiles", "must define at least one profile (e.g. paper and tiny).")
    profile = profile or ("tiny" if "tiny" in profiles else next(iter(profiles)))
    if profile not in profiles:
        raise UserError(f"{chk.path} has no profile {profile!r}{suggest(profile, profiles)}; "
                        f"its profiles: {', '.join(profiles)}.")
    return profile, _included(chk, chk.mapping(profiles[profile], f"profiles.{profile}"), f"profiles.{profile}")


def _included(chk: _Checker, prof: dict, where: str, seen: tuple[Path, ...] = ()) -> dict:
    """A profile with its `include: FILE:PROFILE` resolved: the named profile of another study file (FILE
    relative to this one; it may include in turn) is the start, and this profile's own settings are laid
    over it section by section (scale, model, train, data, resources, requires: key by key; the rest whole).
    The included profile's `rows`, `only_rows` and `skip_rows` are left behind: they name rows of the other study."""
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
    try:
        other = yaml.safe_load(target.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"{target} is not valid UTF-8 YAML ({str(err).splitlines()[0]}).") from None
    sub = _Checker(target)
    profiles = sub.mapping(sub.mapping(other, "top level").get("profiles"), "profiles")
    if name not in profiles:
        chk.fail(f"{where}.include", f"{file} has no profile {name!r}{suggest(name, profiles)}.")
    merged = dict(_included(sub, sub.mapping(profiles[name], f"profiles.{name}"), f"profiles.{name}",
                            (*seen, chk.path.resolve())))
    merged.pop("rows", None)    # a profile's overrides of single rows belong to its own study's rows
    merged.pop("only_rows", None)
    merged.pop("skip_rows", None)
    for key, value in prof.items():
        if key == "include":
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _pick_rows(path: Path, all_rows: dict, rows: list[str] | None) -> list[str]:
    chosen = list(all_rows) if not rows else rows
    for r in chosen:
        if r not in all_rows:
            raise UserError(f"{path} has no row {r!r}{suggest(r, all_rows)}; its rows: {', '.join(all_rows)}.")
    return chosen


def _resources(chk: _Checker, raw: dict, prof: dict, where: str) -> tuple[dict, dict]:
    resources = {"cpu": 1, "gpu": 0, "workers": 1, **chk.mapping(raw.get("resources"), "resources"),
                 **chk.mapping(prof.get("resources"), f"{where}.resources")}
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


def _probe_settings(chk: _Checker, values: dict, where: str) -> dict:
    fields = scaling_fields()
    for key in values:
        if key not in fields:
            chk.fail(f"{where}.{key}", f"unknown probe setting{suggest(key, fields)}; allowed: {', '.join(fields)}.")
    return dict(values)


def _load_probe_study(chk: _Checker, raw: dict, head: dict, study_seeds: list[int], profile: str | None,
                      rows: list[str] | None, seeds: list[int] | None, sets: dict[str, dict]) -> Study:
    """A study whose rows are probe settings (kind scaling): base.probe -> row -> profile.probe."""
    path = head["path"]
    if sets:
        raise UserError(f"--set changes model, train and data settings, and {path} is a {head['kind']} study "
                        f"without them; change its probe settings in the study file instead.")
    base = chk.mapping(raw["base"], "base")
    chk.keys(base, "base", PROBE_BASE_KEYS)
    base_probe = _probe_settings(chk, chk.mapping(base.get("probe"), "base.probe"), "base.probe")
    all_rows = chk.mapping(raw["rows"], "rows")
    if not all_rows:
        chk.fail("rows", "must name at least one row.")
    row_probe = {str(r): _probe_settings(chk, chk.mapping(v, f"rows.{r}"), f"rows.{r}") for r, v in all_rows.items()}
    profile, prof = _pick_profile(chk, raw, profile)
    where = f"profiles.{profile}"
    chk.keys(prof, where, PROBE_PROFILE_KEYS)
    prof_probe = _probe_settings(chk, chk.mapping(prof.get("probe"), f"{where}.probe"), f"{where}.probe")
    resources, requires = _resources(chk, raw, prof, where)
    if resources["workers"] != 1:
        chk.fail("resources.workers", "must be 1 for a scaling study: its probe times one process.")
    chosen = _pick_rows(path, all_rows, rows)
    chosen_seeds = seeds if seeds else study_seeds
    trials = []
    for r in chosen:
        settings = {**base_probe, **row_probe[r], **prof_probe}
        try:
            spec = ScalingSpec(**settings)
            spec.validate()
        except (TypeError, ValueError) as err:
            chk.fail(f"rows.{r} (profile {profile})", f"{err}.")
        probe = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(spec).items()}
        trials += [Trial(row=r, seed=s, model={}, train={}, data={}, kind="scaling", probe=probe)
                   for s in chosen_seeds]
    return Study(**head, profile=profile, rows=chosen, seeds=chosen_seeds, resources=resources,
                 requires=requires, trials=trials)


# How each kind of study file is read: `kind:` names one (default train). The runner's side of a kind
# (dry-run listing, data to prepare, cost estimate, summary columns) is harness/study/kinds.py.
LOADERS = {"train": _load_train_study, "scaling": _load_probe_study}
