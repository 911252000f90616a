"""`python -m harness evaluate RUN_DIR --data DIR [--split test]`: score a finished run's final weights on
any prepared data directory and split (Multi30K's test_2017_flickr, a held-out WSJ folder, ...).

The final weights are what the run itself scored: the mean of its last `train.average_last` checkpoints
(§6.1), or its last checkpoint. The tokenizer is the run's own BPE model (bpe.model in the run directory,
written by every run; for older runs, rebuilt from the run's training data, which then must still be
there). Decoding uses the run's settings (beam, alpha, max_extra, the tree constraint for parsing).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from harness.data.batching import ParallelData
from harness.data.bpe import Tokenizer, train_bpe
from harness.data.corpus import TOKENIZED_FORM, DataConfig, Split, corpus_dir, split_paths, text_form
from harness.data.parse import parse_pairs, parse_symbols
from harness.data.readers import read_parallel
from harness.data.trees import read_tree_texts
from harness.errors import UserError
from harness.eval.bleu import lc_norm_tok
from harness.eval.evaluate import evaluate
from harness.measure.registry import Context
from harness.measure.registry import get as get_measurement
from harness.measure.registry import validate as validate_measurement
from harness.train.checkpoint import average_checkpoints, checkpoint_path, checkpoint_step, list_checkpoints
from harness.train.config import TrainConfig, rate_at
from harness.train.device import autocast_for, resolve_device
from model import ConfigError, ModelConfig, build_model, config_from_dict


def run_config(run_dir: Path) -> tuple[ModelConfig, TrainConfig, DataConfig]:
    path = run_dir / "config.json"
    if not path.is_file():
        raise UserError(f"{run_dir}: no config.json; pass the directory of a finished run (what `train --out` or a "
                        "study trial wrote: config.json, checkpoints/, metrics.json).")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        return config_from_dict(cfg["model"]), TrainConfig.from_dict(cfg["train"]), DataConfig(**cfg["data"])
    except (ValueError, KeyError, TypeError, ConfigError) as err:
        raise UserError(f"{path}: not a run's resolved config ({err}); pass a run directory this harness "
                        "wrote.") from None


def final_weights(run_dir: Path, average_last: int,
                  checkpoint: int | None = None) -> tuple[dict[str, torch.Tensor], list[Path]]:
    """The run's final weights, the ones it scored itself: the checkpoints metrics.json names
    (`scored_checkpoints`: under the patience rule the window ending at the best, not the newest), or, for a run
    that recorded none, the mean of its last `average_last` checkpoints (at least the last one); or the one
    checkpoint of step `checkpoint`, as the run kept it (a learning curve's point, scored on dev)."""
    kept = list_checkpoints(run_dir / "checkpoints")
    if not kept:
        raise UserError(f"{run_dir}: no checkpoints/step_*.pt; the run has not saved its weights yet.")
    if not (run_dir / "metrics.json").is_file():
        raise UserError(f"{run_dir}: no metrics.json, so the run has not finished; evaluate it when it has.")
    if checkpoint is not None:
        paths = [p for p in kept if p == checkpoint_path(run_dir / "checkpoints", checkpoint)]
        if not paths:
            steps = ", ".join(str(checkpoint_step(p)) for p in kept)
            raise UserError(f"--checkpoint {checkpoint}: {run_dir} kept no checkpoint of that step; it kept steps "
                            f"{steps}.")
        return average_checkpoints(paths), paths
    scored = str(_run_metrics(run_dir).get("scored_checkpoints") or "")
    if scored:
        paths = [checkpoint_path(run_dir / "checkpoints", int(s)) for s in scored.split(",")]
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            raise UserError(f"{run_dir}: the checkpoints it scored are gone ({', '.join(missing)}); evaluate a run "
                            "whose checkpoints/ is whole, or name one kept step with --checkpoint.")
        return average_checkpoints(paths), paths
    paths = kept[-max(average_last, 1):]
    return average_checkpoints(paths), paths


def _run_metrics(run_dir: Path) -> dict:
    """The finished run's metrics.json ({} where it cannot be read)."""
    try:
        return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def run_tokenizer(run_dir: Path, model_cfg: ModelConfig, data_cfg: DataConfig) -> Tokenizer:
    """The run's own BPE model, or the same one rebuilt (deterministically) from its training data."""
    if (run_dir / "bpe.model").is_file():
        return Tokenizer(run_dir / "bpe.model")
    root = corpus_dir(data_cfg)
    train = list(split_paths(root, "train"))
    symbols: tuple[str, ...] = ()
    if data_cfg.task == "parse":
        symbols = parse_symbols(read_parallel(*train)[1])
    return Tokenizer(train_bpe(train, model_cfg.vocab_size, Path(data_cfg.cache_dir).resolve() / "bpe", symbols))


def run_text_form(run_dir: Path, run) -> str:
    """The form of the text a run trained on: as the run recorded it, else as its data directory's manifest says
    (generated text is raw)."""
    return _run_metrics(run_dir).get("text_form") or (
        text_form(Path(run.data.name)) if run.data.task != "parse" and Path(run.data.name).is_dir() else "raw")


def read_split(data_dir: Path, split: str, task: str, tokenizer: Tokenizer, max_len: int,
               tagged: bool = False, form: str = "raw") -> tuple[Split, str]:
    """One split of a prepared directory, encoded with the run's tokenizer, in the text form the run trained
    on (`form`); and the target language."""
    if not data_dir.is_dir():
        raise UserError(f"--data {data_dir}: not a directory; pass a prepared data directory (`data prepare ...`).")
    if task == "parse":
        path = data_dir / f"{split}.tree"
        if not path.is_file():
            raise UserError(f"--data {data_dir} has no {split}.tree; a parsing run is scored on a directory "
                            "`data prepare ptb` wrote, with --split train, dev or test.")
        src, tgt, gold = parse_pairs(((f"{path}:{line}: the tree", text) for line, text in read_tree_texts(path)
                                      if text.strip()), tagged=tagged)
        data = ParallelData(tokenizer.encode(src), tokenizer.encode(tgt), max_len, truncate=True)
        return Split(src, tgt, data, gold), "en"
    src_path, tgt_path = split_paths(data_dir, split)
    src, tgt = read_parallel(src_path, tgt_path)
    suffix = tgt_path.suffix.lstrip(".")
    lang = suffix if suffix in ("de", "fr") else "de"
    have = text_form(data_dir)
    if form != have:
        if form != TOKENIZED_FORM:
            raise UserError(f"--data {data_dir} holds Multi30K's {have} text, but the run trained on {form} text; "
                            "prepare the data as the run's was (`data prepare multi30k` without --form).")
        # The run trained on the lc.norm.tok form: the released text is brought into it exactly (lc_norm_tok is
        # the dataset's own scripts, line for line), so a raw test set scores as its tok file would.
        src, tgt = [lc_norm_tok(x, "en") for x in src], [lc_norm_tok(x, lang) for x in tgt]
    data = ParallelData(tokenizer.encode(src), tokenizer.encode(tgt), max_len, truncate=True)
    return Split(src, tgt, data), lang


class LoadedRun(NamedTuple):
    """A finished run's final weights in its model, with what scoring them needs."""
    model: torch.nn.Module
    tokenizer: Tokenizer
    train: TrainConfig
    data: DataConfig
    device: torch.device
    checkpoints: list[Path]      # the checkpoints averaged into the weights (or the one of --checkpoint)


def load_run(run_dir: Path, device: str = "auto", checkpoint: int | None = None,
             check_data: Callable[[DataConfig], None] | None = None) -> LoadedRun:
    """The run's final weights (final_weights) in its model, its own tokenizer, its settings; check_data refuses
    a run's data before any weights are read."""
    model_cfg, train_cfg, data_cfg = run_config(run_dir)
    if check_data is not None:
        check_data(data_cfg)
    weights, paths = final_weights(run_dir, train_cfg.average_last, checkpoint)
    tokenizer = run_tokenizer(run_dir, model_cfg, data_cfg)
    if tokenizer.vocab_size != model_cfg.vocab_size:
        raise UserError(f"{run_dir}: its BPE model has {tokenizer.vocab_size} pieces but the model "
                        f"{model_cfg.vocab_size}; "
                        "the run's training data changed since it ran.")
    dev = resolve_device(device)
    model = build_model(model_cfg).to(dev)
    model.load_state_dict(weights)
    if getattr(model_cfg, "word_positions", False):
        model.mark_words(*tokenizer.word_marks())
    return LoadedRun(model, tokenizer, train_cfg, data_cfg, dev, paths)


def rescore(run_dir: str | Path, data_dir: str | Path, split: str = "test", device: str = "auto",
            checkpoint: int | None = None, constrained: bool = False) -> dict:
    """Metrics of the run's final weights (or of its checkpoint of step `checkpoint`) on `split` of
    `data_dir`, keyed `{split}_ppl`, `{split}_bleu`, `{split}_bleu_tok`, `{split}_bleu_tok_lc` (translation)
    or `{split}_f1` ... (parsing; `{split}_f1_constrained` too where the run decoded under the tree
    constraint or `constrained` asks for it)."""
    run = load_run(Path(run_dir), device, checkpoint)
    train_cfg = run.train
    # the form of the text the run trained on: as the run recorded it, else as its data directory's manifest says
    # (generated text is raw)
    form = run_text_form(Path(run_dir), run)
    data, lang = read_split(Path(data_dir), split, run.data.task, run.tokenizer, run.model.cfg.max_len,
                            run.data.parse_tags, form)
    metrics, _ = evaluate(run.model, run.tokenizer, data, run.device, prefix=split, beam_size=train_cfg.beam_size,
                          alpha=train_cfg.alpha, max_extra=train_cfg.max_extra, max_tokens=train_cfg.max_tokens,
                          bleu_sentences=None, autocast=autocast_for(run.device, train_cfg.amp, train_cfg.cpu_amp),
                          constrained=train_cfg.constrained or constrained, lang=lang, moses=str(train_cfg.bleu_moses),
                          tokenized=form == TOKENIZED_FORM)
    metrics[f"{split}_sentences"] = len(data.data)
    metrics[f"{split}_checkpoints_averaged"] = len(run.checkpoints)
    if checkpoint is not None:
        metrics[f"{split}_checkpoint_step"] = checkpoint
    return metrics


def measure_run(run_dir: str | Path, name: str, settings: dict, device: str = "auto",
                out: Path | None = None) -> tuple[dict, int]:
    """Measurement `name` (harness/measure) taken on a finished run's final weights, as the run itself takes it
    on them with train.NAME_* settings, here `settings` ({field: value}); its artifacts go to `out` (None:
    none written). Returns (its metrics, checkpoints averaged)."""
    m = get_measurement(name)
    if m.at_end is None:
        raise UserError(f"measurement {name} is taken while a run trains, not on its final weights.")
    try:
        chosen = dataclasses.replace(m.default(), **settings)
    except TypeError as err:
        raise UserError(f"measurement {name}: {err}; its settings are "
                        f"{', '.join(f.name for f in dataclasses.fields(m.settings))}.") from None
    validate_measurement(m, chosen)
    model_cfg, _, _ = run_config(Path(run_dir))
    check = (lambda data_cfg: m.check(chosen, model_cfg, data_cfg)) if m.check is not None else None
    run = load_run(Path(run_dir), device, check_data=check)
    dev, lang = read_split(corpus_dir(run.data), "dev", run.data.task, run.tokenizer, run.model.cfg.max_len,
                           run.data.parse_tags, run_text_form(Path(run_dir), run))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    ctx = Context(run.model, run.tokenizer, dev, lang, run.data, run.train, run.device,
                  autocast_for(run.device, run.train.amp, run.train.cpu_amp), out,
                  rate_at=lambda s: rate_at(s, run.train, run.model.cfg.d_model))
    return m.at_end(ctx, chosen), len(run.checkpoints)
