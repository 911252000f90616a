"""The study kind `train` (Tables 2, 3 and 4; parsing is a data task): each row is a model trained and
evaluated. Its file's rows are model, train and data settings, resolved in the order spec.py's module doc
gives; its trial trains, scores and logs the row (harness/train), with the training FLOPs and the device's
matmul rate that Table 2's cost columns need."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness import overrides
from harness.data.corpus import DataConfig, prepare_data
from harness.errors import UserError
from harness.io import atomic_write
from harness.metrics import label
from harness.study.estimate import (
    ASSUMED_SENTENCE_LEN,
    Timing,
    duration,
    estimated_flops,
    measured_rate,
    packed_wall,
    parameter_count,
    trial_seconds,
    wall_slots,
)
from harness.study.spec import (
    BASE_KEYS,
    PROFILE_KEYS,
    Checker,
    Selection,
    Study,
    StudyFile,
    checked_rows,
    known_row,
    pick_profile,
    pick_rows,
    profile_overrides,
    profile_row_seeds,
    profile_rows,
    profile_seeds,
    resources,
    scaled,
    section_overrides,
)
from harness.tracking import TrialRun
from harness.train import preset, train
from harness.train.dist import SINGLE, Ranks
from harness.trial import Trial, fault_hook, injected_fault
from model import ConfigError, get_preset, to_dict, with_settings

SECTIONS = overrides.SECTIONS


# --- the study file ---

@dataclass(frozen=True)
class Layers:
    """The layers a row's settings are resolved through, each by section (model, train, data), read and checked."""
    preset: str
    base: dict[str, dict]               # the study's base, then the profile's changes to it
    rows: dict[str, dict[str, dict]]    # each row's own settings
    factors: dict[str, dict]            # the profile's scale
    profile: dict[str, dict]            # the profile's settings
    profile_rows: dict[str, dict[str, dict]]   # the profile's overrides of single rows
    profile_base: dict[str, dict] = field(default_factory=dict)   # the profile's `base:` (in `base` too; `show`)

    def resolve(self, row: str, seed: int, sets: dict[str, dict]) -> Trial:
        """preset -> base -> row -> scale -> profile -> the profile's row -> `run --set`."""
        last = {sec: {**self.profile[sec], **self.profile_rows.get(row, {}).get(sec, {}), **sets.get(sec, {})}
                for sec in SECTIONS}
        own = self.rows[row]
        wide = (set(self.profile["model"]) - set(self.profile_rows.get(row, {}).get("model", {}))
                - set(sets.get("model", {})))
        # with_settings: a row or profile may name another model family (`model.family`, model/family.py)
        model_preset, train_preset = preset(self.preset)
        model = with_settings(with_settings(model_preset, **self.base["model"]), **own["model"])
        train_cfg = train_preset.replace(**{**self.base["train"], **own["train"]})
        data = dataclasses.replace(DataConfig(), **{**self.base["data"], **own["data"]})
        # a profile's scale applies to the fields the row's family has (a rival has no d_ff, d_k or N)
        model = with_settings(model, **{k: scaled(getattr(model, k), f) for k, f in self.factors["model"].items()
                                        if hasattr(model, k)})
        train_cfg = train_cfg.replace(**{k: scaled(getattr(train_cfg, k), f)
                                                      for k, f in self.factors["train"].items()})
        data = dataclasses.replace(data, **{k: scaled(getattr(data, k), f) for k, f in self.factors["data"].items()})
        train_cfg = train_cfg.replace(**last["train"], seed=seed)
        train_cfg.validate()
        # The profile's settings of every row, like its scale, apply to the fields the row's family has; its
        # settings of this row and `run --set` apply whole (a field the family lacks is refused).
        last["model"] = {k: v for k, v in last["model"].items() if k not in wide or hasattr(model, k)}
        return Trial(row=row, seed=seed, model=with_settings(model, **last["model"]), train=train_cfg,
                     data=dataclasses.replace(data, **last["data"]))


    def sources(self, row: str, trial: Trial, sets: dict[str, dict]) -> list[tuple[str, object, str]]:
        """Each resolved setting of the row's trial as (section.key, value, where it came from): the preset (or
        the family's or the data's default), the base, the profile's base, the row, the profile's scale, the
        profile, the profile's settings of this row, `--set`, the trial's seed, or `derived` (a field that follows
        others, e.g. d_k)."""
        model_preset, train_preset = preset(self.preset)
        start = {"model": to_dict(model_preset), "train": train_preset.to_dict(),
                 "data": dataclasses.asdict(DataConfig())}
        final = {"model": to_dict(trial.model), "train": trial.train.to_dict(),
                 "data": dataclasses.asdict(trial.data)}
        steps = [("base", self.base), ("profile base", self.profile_base), ("row", self.rows[row]),
                 *((f"profile scale x{f:g}", {sec: {k: f}}) for sec in SECTIONS for k, f in self.factors[sec].items()),
                 ("profile", self.profile), ("profile row", self.profile_rows.get(row, {})), ("--set", sets)]
        out = []
        for sec in SECTIONS:
            for key, value in final[sec].items():
                src = ("data default" if sec == "data" else f"preset {self.preset}") if key in start[sec] \
                    else "family default"
                touched = False
                for name, layer in steps:
                    if key in layer.get(sec, {}):   # a scale multiplies what the layers before it set
                        src = f"{src} {name[len('profile scale '):]} (profile scale)" \
                            if name.startswith("profile scale") else name
                        touched = True
                if sec == "train" and key == "seed":
                    src = "the trial's seed"
                elif not touched and key in start[sec] and start[sec][key] != value:
                    src = "derived"
                out.append((f"{sec}.{key}", value, src))
        return out


def _read_layers(chk: Checker, raw: dict, prof: dict, where: str, all_rows: dict) -> Layers:
    base = chk.mapping(raw["base"], "base")
    chk.keys(base, "base", BASE_KEYS)
    preset = _known_preset(chk, base.get("preset", "paper_base"), "base.preset")
    prof_base = chk.mapping(prof.get("base"), f"{where}.base")
    chk.keys(prof_base, f"{where}.base", BASE_KEYS - {"preset"})
    def part(layer: dict, at: str, sec: str) -> dict:
        return section_overrides(chk, chk.mapping(layer.get(sec), f"{at}.{sec}"), f"{at}.{sec}", sec)[sec]
    prof_base_over = {sec: part(prof_base, f"{where}.base", sec) for sec in SECTIONS}
    base_over = {sec: {**part(base, "base", sec), **prof_base_over[sec]} for sec in SECTIONS}
    row_over = {str(r): section_overrides(chk, chk.mapping(v, f"rows.{r}"), f"rows.{r}", None)
                for r, v in all_rows.items()}
    if "preset" in prof:
        preset = _known_preset(chk, prof["preset"], f"{where}.preset")
    factors, prof_over = profile_overrides(chk, prof, where)
    prof_rows = chk.mapping(prof.get("rows"), f"{where}.rows")
    for r in prof_rows:
        known_row(chk, r, f"{where}.rows.{r}", all_rows)
    prof_row_over = {str(r): section_overrides(chk, chk.mapping(v, f"{where}.rows.{r}"), f"{where}.rows.{r}", None)
                     for r, v in prof_rows.items()}
    return Layers(preset, base_over, row_over, factors, prof_over, prof_row_over, prof_base_over)


def _known_preset(chk: Checker, name, where: str) -> str:
    try:
        get_preset(str(name))
    except ConfigError as err:
        chk.fail(where, str(err))
    return name


def load(file: StudyFile, sel: Selection) -> Study:
    """A study whose rows are model/train/data overrides of a preset (spec.py's module doc)."""
    chk, raw = file.chk, file.raw
    profile, prof = pick_profile(chk, raw, sel.profile)
    where = f"profiles.{profile}"
    chk.keys(prof, where, PROFILE_KEYS)
    all_rows = checked_rows(file)
    layers = _read_layers(chk, raw, prof, where, all_rows)
    runs_rows = profile_rows(chk, prof, where, all_rows)
    if "seed" in sel.sets.get("train", {}):
        raise UserError("--set train.seed is not accepted by `run`: choose the trials' seeds with --seeds, e.g. "
                        "--seeds 0,1,2.")
    needs, requires = resources(chk, raw, prof, where, sel.sets.get("resources"))
    chosen = pick_rows(file.path, all_rows, sel.rows) if sel.rows else runs_rows
    for r in chosen:
        if r not in runs_rows:
            which = "only_rows" if "only_rows" in prof else f"rows, skip_rows {', '.join(map(str, prof['skip_rows']))}"
            raise UserError(f"{file.path}: profile {profile} does not run row {r!r} (its {which}: "
                            f"{', '.join(runs_rows)}); choose one of those, or another profile.")
    seeds = sel.seeds if sel.seeds else profile_seeds(chk, prof, where, file.seeds)
    row_seeds = {} if sel.seeds else profile_row_seeds(chk, prof, where, all_rows, seeds)
    trials = []
    for r in chosen:
        for seed in row_seeds.get(r, seeds):
            try:
                trials.append(layers.resolve(r, seed, sel.sets))
            except (ConfigError, UserError, TypeError) as err:
                chk.fail(f"rows.{r} (profile {profile}{', with --set' if sel.sets else ''})", str(err))
    notes = prof.get("departure_notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) and n.strip() for n in notes):
        chk.fail(f"{where}.departure_notes", "must be a list of sentences (departures no setting shows)")
    return Study(**file.head, profile=profile, rows=chosen, seeds=seeds, resources=needs, requires=requires,
                 trials=trials, departure_notes=[" ".join(n.split()) for n in notes], all_rows=runs_rows)


def explain(file: StudyFile, sel: Selection, row: str) -> list[tuple[str, object, str]]:
    """`show STUDY ROW`: the row's resolved settings (its first seed's trial), each with where it came from."""
    study = load(file, dataclasses.replace(sel, rows=[row]))     # checks the file, the profile and the row
    profile, prof = pick_profile(file.chk, file.raw, sel.profile)
    layers = _read_layers(file.chk, file.raw, prof, f"profiles.{profile}", checked_rows(file))
    # what each trial of the study takes (`run --set resources.KEY=V` included), and from where
    given = (("--set", sel.sets.get("resources") or {}), ("profile", prof.get("resources") or {}),
             ("study", file.raw.get("resources") or {}))
    takes = [(f"resources.{k}", v, next((name for name, layer in given if k in layer), "default"))
             for k, v in study.resources.items()]
    return layers.sources(row, study.trials[0], sel.sets) + takes


# --- the driver's side: dry run, data, summary ---

def print_trials(study: Study, timing: Timing = Timing()) -> None:
    head = f"{'trial':<20}{'hash':<14}{'N':>3}{'d_model':>8}{'d_ff':>6}{'h':>4}{'d_k':>5}{'d_v':>5}" \
           f"{'P_drop':>7}{'eps_ls':>7}{'steps':>8}{'params':>10}{'est. FLOPs':>12}"
    print(head + (f"{'est. time':>11}" if timing.wanted else "")
          + (f"{'tok/s':>9}{'% peak':>8}" if timing.measured else ""))
    total, times, cache = 0.0, [], {}
    workers = int(study.resources.get("workers", 1))
    if timing.measure:       # time updates with the threads a trial (or each of its workers) gets
        torch.set_num_threads(max(1, round(float(study.resources.get("cpu", 1)))))
    for t in study.trials:
        n, flops = parameter_count(t), estimated_flops(t)
        total += flops
        m = {name: getattr(t.model, name, "-") for name in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v",
                                                             "p_drop")}   # another family may lack some
        line = (f"{t.key:<20}{t.config_hash:<14}{m['n_layers']:>3}{m['d_model']:>8}{m['d_ff']:>6}{m['n_heads']:>4}"
                f"{m['d_k']:>5}{m['d_v']:>5}{m['p_drop']:>7}{t.train.label_smoothing:>7}{t.train.steps:>8}"
                f"{n / 1e6:>9.2f}M{flops:>12.2e}")
        if timing.wanted:
            times.append(trial_seconds(t, flops, timing, workers, cache))
            line += f"{duration(times[-1]):>11}"
            if timing.measured:       # the update's own rate, as the trial will train
                tokens_s, share = measured_rate(t, flops, cache)
                line += f"{tokens_s:>9,.0f}{100 * share:>7.0f}%"
        print(line, flush=True)
    print(f"estimated training cost: {total:.2e} FLOPs (analytic count, sentences of {ASSUMED_SENTENCE_LEN} "
          f"tokens; data: {study.trials[0].data.name})")
    if timing.wanted:
        slots, where = wall_slots(timing, float(study.resources.get("cpu", 1)), workers)
        rate = f"{timing.tflops:g} TFLOP/s per device (given)" if timing.tflops else \
            f"updates timed on this machine's {'GPU' if torch.cuda.is_available() else 'CPU'}"
        print(f"estimated time: {duration(sum(times))} of training in all; {where} ({slots} at a time, longest "
              f"first): {duration(packed_wall(times, slots))} wall. From {rate}; evaluation, data preparation and "
              "start-up not included." + (" tok/s: target tokens a second of the measured update (sentences of "
                                           f"{ASSUMED_SENTENCE_LEN} tokens); % peak: its counted FLOPs a second "
                                           "against this machine's matmul peak, same dtype and threads."
                                           if timing.measured else ""))


def prepare(trials: list[Trial]) -> None:
    """The generated corpus and the BPE model per vocabulary size, once in the driver: trials then only read
    the caches instead of racing to write them."""
    for data_cfg, vocab_size in {(t.data, t.model.vocab_size) for t in trials}:
        prepare_data(data_cfg, vocab_size)


def summary_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    quality = ["dev_f1", "test_f1"] if any("dev_f1" in m for m in metrics) else ["dev_bleu", "dev_bleu_tok"]
    test = ["test_bleu"] if any("test_bleu" in m for m in metrics) else []
    return [(label(name), name) for name in ("dev_ppl", *quality, *test)]


# --- the trial ---

def params(trial: Trial) -> dict:
    return {"model": to_dict(trial.model), "train": trial.train.to_dict(),
            "data": dataclasses.asdict(trial.data)}


def run(trial: Trial, out_dir: Path, run: TrialRun | None, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """Train and evaluate the row, log the final metrics and artifacts (run None: a rank other than 0, which
    only trains)."""
    model_cfg, train_cfg, data_cfg = trial.model, trial.train, trial.data
    hooks = fault_hook(injected_fault(trial.row, ranks.rank), out_dir, ranks.rank)
    if run is None:
        train(model_cfg, train_cfg, data_cfg, out_dir, quiet=True, hooks=hooks, ranks=ranks)
        return {}, ""
    if run.reopened:     # rows an earlier attempt wrote while the store was unreachable
        run.backfill(out_dir / "metrics.jsonl")
    metrics = train(model_cfg, train_cfg, data_cfg, out_dir, quiet=True, on_log=run.log_step, hooks=hooks,
                    ranks=ranks)
    # Training FLOPs, counted analytically (harness/probes/flops.py; agrees with fvcore and torch's counter)
    # for sentences of the corpus's mean lengths: per target token, and for the whole run.
    from harness.probes.flops import training_flops_per_target_token
    per_token = training_flops_per_target_token(with_settings(model_cfg, vocab_size=metrics["vocab_size"]),
                                                max(1, round(metrics["mean_src_len"])),
                                                max(1, round(metrics["mean_tgt_len"])))
    metrics.update({"flops_per_target_token": per_token, "train_flops": per_token * metrics["tokens_seen"]})
    # The yardstick for Table 2's cost column computed the paper's way (time x devices x a sustained rate):
    # this device's own large-matmul rate, in the dtype training ran in, with the trial's threads.
    from harness.probes.peak import matmul_peak
    from harness.train.device import matmul_dtype
    device = torch.device(metrics["device"])
    dtype = matmul_dtype(device, train_cfg)
    metrics["device_matmul_tflops"] = matmul_peak(device, dtype)
    run.log_final(metrics, metrics["steps"])
    from harness.probes.manifest import manifest  # the run's architecture manifest, beside its config
    settings = json.loads((out_dir / "config.json").read_text())["model"]
    atomic_write(out_dir / "architecture.json", json.dumps(manifest(settings), indent=2) + "\n")
    curve = loss_curve_png(out_dir / "metrics.jsonl", out_dir / "loss_curve.png", f"{trial.key} training loss")
    run.log_artifacts([out_dir / "config.json", out_dir / "architecture.json", out_dir / "dev_translations.txt",
                       out_dir / "metrics.jsonl",
                       *([curve] if curve else []),
                       *([out_dir / "heads.json"] if (out_dir / "heads.json").is_file() else [])])
    if "dev_f1" in metrics:
        summary = f"dev PPL {metrics['dev_ppl']:.2f}, F1 {metrics['dev_f1']:.2f}"
    else:
        summary = f"dev PPL {metrics['dev_ppl']:.2f}, BLEU {metrics.get('dev_bleu', float('nan')):.2f}"
    return metrics, summary
def loss_curve_png(metrics_jsonl: Path, out: Path, title: str) -> Path | None:
    rows = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()] \
        if metrics_jsonl.exists() else []
    points = [(r["step"], r["train_loss"]) for r in rows if "train_loss" in r]
    if not points:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(*zip(*sorted(dict(points).items())))
    ax.set(xlabel="step", ylabel="training loss (label-smoothed)", title=title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out




def smoke(trial: Trial, cache_dir: Path) -> tuple[Trial, dict]:
    """The trial shrunk to two steps on a corpus of a thousand pairs (seconds on a CPU), each measurement it takes to
    that measurement's smoke sizes (harness/measure: e.g. 4 sentences a length bucket), and what its result must
    show: {metric: (low, high), or the name of a metric it equals}."""
    shrink = {f"{m.name}_{k}": min(getattr(settings, k), most) for m, settings in trial.train.active()
              for k, most in m.smoke.items() if getattr(settings, k)}        # each measurement's own smoke sizes
    small = dataclasses.replace(
        trial, train=trial.train.replace(steps=2, bleu_sentences=2, max_extra=3, checkpoint_every=0, **shrink),
        data=dataclasses.replace(trial.data, train_pairs=1000, dev_pairs=4, test_pairs=4, cache_dir=str(cache_dir)))
    expect = {"steps": (2, 2), "dev_ppl": (1.0, math.inf), "flops_per_target_token": (1e-9, math.inf),
              "train_flops": (1e-9, math.inf), "device_matmul_tflops": (1e-9, math.inf)}
    if trial.data.task == "parse":
        expect.update({"dev_f1": (0.0, 100.0), "test_parsed_sentences": (2, 2)})
    return small, expect


probe_type = None       # a training row's settings are its model, train and data configs
