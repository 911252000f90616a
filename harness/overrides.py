"""`--set key=value` (and, later, study rows): typed overrides of the model, train and data configs.

Keys are field names, optionally qualified (`model.d_model`, `train.steps`, `data.train_pairs`). Values are
parsed as YAML scalars and checked against the field's type; unknown keys get a did-you-mean."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import yaml

from harness.data.corpus import DataConfig
from harness.errors import UserError, suggest
from harness.measure.registry import field_types as measure_field_types
from harness.train import TrainConfig
from model import ConfigError, with_settings
from model.family import field_types

SECTIONS: dict[str, type | None] = {"model": None, "train": TrainConfig, "data": DataConfig}   # model: every family's


@dataclass(frozen=True)
class Resources:
    """What each trial of a study takes (a study file's `resources:`), settable with `run --set resources.KEY=V`."""
    cpu: float = 1         # CPUs per worker
    gpu: float = 0         # GPUs per worker (a fraction shares one)
    workers: int = 1       # data-parallel workers of a trial (Ray Train)


# `run` takes a study's resources too (`--set resources.gpu=8`); `train` and `bench` take the configs only.
RUN_SECTIONS: dict[str, type | None] = {**SECTIONS, "resources": Resources}


def _fields(cls: type | None) -> dict[str, Any]:
    if cls is None:                    # the model section: the settings of every registered model family
        return field_types()
    hints = typing.get_type_hints(cls)
    out = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name != "measures"}
    if cls is TrainConfig:             # and the measurements' settings, spelled as train keys (harness/measure)
        out.update(measure_field_types())
    return out


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _check_type(key: str, value: Any, hint: Any) -> Any:
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            raise UserError(f"{key} must be one of {', '.join(map(str, get_args(hint)))}, got {value!r}.")
        return value
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if value is None and len(options) < len(get_args(hint)):
            return None
        return _check_type(key, value, options[0])
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{key} must be true or false, got {value!r}.")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{key} must be an integer, got {value!r}.")
        return value
    if hint is float:
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            value = float(value)    # YAML 1.1 reads 1e-3 (no dot) as a string; it is the number users mean
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key} must be a number, got {value!r}.")
        return float(value)
    if hint is str:
        return str(value)
    return value


def resolve_key(key: str, sections: dict[str, type | None] = SECTIONS) -> tuple[str, str]:
    """'d_model' -> ('model', 'd_model'); 'train.seed' -> ('train', 'seed'). Ambiguous bare keys are refused."""
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            only = " (resources.* are a study's: `run --set`)" if section == "resources" else ""
            raise UserError(f"unknown setting section {section!r} in {key!r}{only}; use one of "
                            f"{', '.join(sections)}.")
        if name not in _fields(sections[section]):
            hint = suggest(name, _fields(sections[section]), prefix=f"{section}.")
            raise UserError(f"unknown setting {key!r}{hint}; {section} settings are: "
                            f"{', '.join(_fields(sections[section]))}.")
        return section, name
    owners = [s for s, cls in SECTIONS.items() if key in _fields(cls)]
    if len(owners) > 1:
        raise UserError(f"setting {key!r} exists in {' and '.join(owners)}; qualify it, e.g. {owners[0]}.{key}.")
    if not owners:
        every = [n for cls in SECTIONS.values() for n in _fields(cls)]
        hint = suggest(key, every)
        raise UserError(f"unknown setting {key!r}{hint}; `python -m harness list settings` lists them.")
    return owners[0], key


def parse_sets(pairs: list[str], sections: dict[str, type | None] = SECTIONS) -> dict[str, dict[str, Any]]:
    """['d_model=256', 'train.steps=10'] -> {'model': {'d_model': 256}, 'train': {'steps': 10}, 'data': {}};
    sections=RUN_SECTIONS takes `resources.KEY=V` too."""
    out: dict[str, dict[str, Any]] = {s: {} for s in sections}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"--set {pair!r} is not of the form key=value (e.g. --set d_model=256).")
        key, raw = pair.split("=", 1)
        section, name = resolve_key(key.strip(), sections)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        out[section][name] = _check_type(key.strip(), value, _fields(sections[section])[name])
    return out


def check_value(key: str, value: Any, section: str, name: str) -> Any:
    """A value for one field, type-checked (key is how the user wrote it, for the message)."""
    return _check_type(key, value, _fields(SECTIONS[section])[name])


def apply(model_cfg, train_cfg: TrainConfig, data_cfg: DataConfig, sets: dict[str, dict[str, Any]]) -> tuple:
    """The configs with the overrides applied; `model.family` switches family (model/family.py)."""
    try:
        model_cfg = with_settings(model_cfg, **sets.get("model", {}))
    except ConfigError as err:
        raise UserError(str(err)) from None
    train_cfg = train_cfg.replace(**sets.get("train", {}))
    train_cfg.validate()
    data_cfg = dataclasses.replace(data_cfg, **sets.get("data", {}))
    return model_cfg, train_cfg, data_cfg


def field_comments(cls: type) -> dict[str, str]:
    """Each field's one line of help: the first sentence of the comment on its line (with the comment lines below
    that continue it, their # in the same column) or of the comment block above it, in the class's source."""
    import inspect
    import re
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    raw: dict[str, list[str]] = {}
    block: list[str] = []                     # the comment lines just above the next field
    inline: tuple[str, int] | None = None     # the last field with a comment on its line, and that #'s column
    for line in lines:
        m = re.match(r"^\s+([a-z_][a-z_0-9]*)\s*:\s*[^=#]+(?:=[^#]*)?(?:#\s*(.*))?$", line)
        if m:
            if m.group(1) not in raw:
                raw[m.group(1)] = [m.group(2)] if m.group(2) else block
            inline = (m.group(1), line.rfind("#", 0, m.start(2))) if m.group(2) else None
            block = []
            continue
        comment = re.match(r"^\s+#\s*(.*)$", line)
        if comment and inline and line.index("#") == inline[1]:
            raw[inline[0]].append(comment.group(1))           # the field's own comment, continued
        elif comment:
            block, inline = block + [comment.group(1)], None
        else:
            block, inline = [], None
    return {name: first_sentence(" ".join(parts)) for name, parts in raw.items()}


def first_sentence(text: str, most: int = 200) -> str:
    """The text's first sentence (to a full stop before a capital, a bracket or a quote: "e.g. d_k" goes on),
    cut at a word with an ellipsis past `most` characters."""
    import re
    text = " ".join(text.split())
    end = re.search(r"\.\s+(?=[A-Z(\"`§])", text)
    text = text[:end.start() + 1] if end else text
    return text if len(text) <= most else text[:most - 1].rsplit(" ", 1)[0] + " …"


def catalogue() -> list[tuple[str, str, str, str, str]]:
    """Every `--set` key, for each model family, the training settings, each measurement and the data: (key, type,
    default, one line of help, whose setting it is)."""
    from harness.measure.registry import measurements
    from model.family import FAMILIES

    def rows(cls, section: str, owner: str, keys: dict[str, str] | None = None):
        hints, helps = typing.get_type_hints(cls), field_comments(cls)
        for f in dataclasses.fields(cls):
            if f.name == "measures" or f.name.isupper():
                continue
            default = "(derived)" if f.default is None and f.name in ("d_k", "d_v", "n_kv_heads", "n_enc_layers",
                                                                      "n_dec_layers") else \
                repr(f.default) if f.default is not dataclasses.MISSING else "…"
            hint = hints[f.name]
            shown = getattr(hint, "__name__", str(hint).replace("typing.", ""))
            choices = get_args(hint) if get_origin(hint) is Literal else ()
            yield (f"{section}.{(keys or {}).get(f.name, f.name)}", "str" if choices else shown, default,
                   helps.get(f.name, ""), owner, choices)

    out = []
    for name, family in FAMILIES.items():
        out += rows(family.config, "model", f"model family {name}")
    out += rows(TrainConfig, "train", "training")
    for m in measurements():
        out += rows(m.settings, "train", f"measurement {m.name}", {v: k for k, v in m.keys().items()})
    out += rows(DataConfig, "data", "data")
    out += rows(Resources, "resources", "resources (a study's, per trial: `run --set` and `show --set` only)")
    # a family that shares a key with the first (the decoder-only model's d_model, n_heads, ...) shares its help
    first = {}
    for key, _, _, doc, _, _ in out:
        first.setdefault(key, doc)
    # a setting with several choices names them first, before its help line is cut
    return [(key, kind, default, "; ".join(filter(None, [f"one of {' | '.join(map(str, choices))}"
                                                         if len(choices) > 1 else "", doc or first[key]])), whose)
            for key, kind, default, doc, whose, choices in out]
