"""The finish of a run: checkpoint averaging (§6.1), the final dev (and test) evaluation with BLEU, and
metrics.json and dev_translations.txt in the run directory."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch

from harness.data.corpus import TOKENIZED_FORM, DataConfig
from harness.eval.evaluate import evaluate, perplexity
from harness.io import atomic_write, atomic_writer
from harness.measure.registry import Context, measured
from harness.train.checkpoint import Checkpointer
from harness.train.compile import compiled_graphs
from harness.train.config import TrainConfig, rate_at
from harness.train.patience import Patience, window


def scored_steps(cfg: TrainConfig, ckpt: Checkpointer, rule: Patience | None) -> list[int]:
    """The checkpoints whose mean weights are scored: under the patience rule the average_last ending at the
    best evaluation (average_at "last": ending at the stop), else the last average_last ([]: the weights as
    they are, no averaging)."""
    taken = ckpt.steps()
    if rule is not None:
        chosen = window(taken, rule.best_step, cfg.average_last) if cfg.average_at == "best" else []
        return chosen or taken[-max(cfg.average_last, 1):]
    return taken[-cfg.average_last:] if cfg.average_last > 1 else []


def _digest(model, split, settings: dict) -> str:
    """What identifies one evaluation: the weights (every tensor's bytes), the split's text and the settings."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for line in (*split.src_text, *split.tgt_text):
        h.update(line.encode())
    h.update(json.dumps({k: v for k, v in settings.items() if k != "autocast"}, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _evaluated(out: Path | None, name: str, model, data, split, device, **settings) -> tuple[dict, list]:
    """`evaluate` of one split, kept in the run directory (final_eval/NAME.json) beside a digest of the weights, the
    split and the settings: a run cut while finishing (beam search over every dev and test sentence, the longest part
    of a finish on a CPU) resumes with the splits it had scored, and a kept result is used only for the same weights,
    text and settings. out None (a rank that writes nothing): evaluated, not kept."""
    if out is None:
        return evaluate(model, data.tokenizer, split, device, **settings)
    path, key = out / "final_eval" / f"{name}.json", _digest(model, split, settings)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return kept["metrics"], kept["hyps"]
    except (OSError, ValueError, AttributeError):
        pass                                     # none kept, or unreadable: evaluate again
    metrics, hyps = evaluate(model, data.tokenizer, split, device, **settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"key": key, "metrics": metrics, "hyps": hyps}) + "\n")
    return metrics, hyps


def final_metrics(model, data, cfg: TrainConfig, device, autocast, ckpt: Checkpointer,
                  data_cfg: DataConfig | None = None, rule: Patience | None = None,
                  out: Path | None = None) -> tuple[dict, list]:
    """Average the checkpoints of `scored_steps` into the model (when there are any), then score it.
    Averaged, the last checkpoint alone is scored first: its dev PPL (dev_ppl_last) and, with eval_test, the
    whole test evaluation (the test_*_last metrics). Then the run's measurements (harness/measure) take the
    final weights; `out`, the run directory, receives their artifacts (None: none written)."""
    eval_kwargs = dict(beam_size=cfg.beam_size, alpha=cfg.alpha, max_extra=cfg.max_extra,
                       max_tokens=cfg.max_tokens, bleu_sentences=cfg.bleu_sentences or None,
                       autocast=autocast, constrained=cfg.constrained,
                       lang=data.tgt_lang,   # EN-FR: the tokenized BLEU with Moses' French rules
                       moses=str(cfg.bleu_moses), tokenized=data.info.get("form") == TOKENIZED_FORM)
    averaged, last_metrics = 0, {}
    chosen = scored_steps(cfg, ckpt, rule)
    if chosen and chosen != ckpt.steps()[-1:]:     # anything but the last weights alone
        # The last weights' own dev PPL ends the learning curve (whether training had converged is a question
        # about them, not about their average); what averaging buys is the difference from dev_ppl.
        last_metrics["dev_ppl_last"] = perplexity(model, data.dev.data, cfg.max_tokens, device, autocast)
        if cfg.eval_test:   # and on the test set, the last checkpoint alone scored in full first
            scored, _ = _evaluated(out, "test_last", model, data, data.test, device, prefix="test", **eval_kwargs)
            last_metrics.update({f"{k}_last": v for k, v in scored.items() if isinstance(v, (int, float))})
        model.load_state_dict(ckpt.average_steps(chosen))
        averaged = len(chosen)
    if chosen:
        last_metrics.update({"scored_from_step": chosen[0], "scored_to_step": chosen[-1]})
    # Which weights were scored, for `evaluate` to score the same ones later (a string: an MLflow tag)
    last_metrics["scored_checkpoints"] = ",".join(map(str, chosen))
    metrics, hyps = _evaluated(out, "dev", model, data, data.dev, device, prefix="dev", **eval_kwargs)
    if cfg.eval_test:
        test_metrics, _ = _evaluated(out, "test", model, data, data.test, device, prefix="test", **eval_kwargs)
        metrics.update(test_metrics)
    # The measurements taken on the final weights (harness/measure), in the registry's order
    rate = lambda s: rate_at(s, cfg, model.cfg.d_model)        # noqa: E731   the schedule (plateau: unshrunk)
    metrics.update(measured(cfg.active(), "at_end", lambda: Context(model, data.tokenizer, data.dev, data.tgt_lang,
                                                                   data_cfg, cfg, device, autocast, out,
                                                                   rate_at=rate)))
    metrics.update(last_metrics)
    metrics["averaged_checkpoints"] = averaged
    return metrics, hyps


def finish(model, data, cfg: TrainConfig, device, autocast, ckpt: Checkpointer, out: Path, run: dict,
           is_main: bool = True, data_cfg: DataConfig | None = None, rule: Patience | None = None) -> dict:
    """The final metrics: the evaluation's, then `run` (what the loop measured), then the corpus's.
    The main rank writes metrics.json and the first 50 dev translations."""
    t_eval = time.perf_counter()
    metrics, hyps = final_metrics(model, data, cfg, device, autocast, ckpt, data_cfg, rule, out if is_main else None)
    train_data = data.train.data
    averaged = metrics.pop("averaged_checkpoints")
    run = dict(run)
    stopped = run.pop("stopped_by_time")
    eval_wall = time.perf_counter() - t_eval
    trial_wall = run.get("loop_seconds", 0.0) + eval_wall
    trial_cpu = run.pop("loop_cpu_seconds", 0.0) + eval_wall * torch.get_num_threads()
    metrics.update(run)
    if run.get("diverged"):         # stop_diverged: a diverged run is scored as its start (the weights' own kept)
        metrics["dev_ppl_measured"], metrics["dev_ppl"] = metrics.get("dev_ppl"), run["dev_ppl_start"]
    metrics.update({
        "compiled_graphs": compiled_graphs() if cfg.compile else None, "averaged_checkpoints": averaged,
        "stopped_by_time": stopped, "eval_seconds": time.perf_counter() - t_eval,
        # what the trial cost, across interruptions: the loop's wall time and the final evaluation's, and that
        # times the threads it ran on (CPU seconds; the study's CPU-hours are their sum)
        "trial_wall_seconds": trial_wall, "cpu_seconds": trial_cpu, "text_form": data.info.get("form", "raw"),
        "device": str(device), "vocab_size": data.tokenizer.vocab_size, "bleu_tok_lang": data.tgt_lang,
        "bleu_tok_moses": str(cfg.bleu_moses),
        "dev_truncated": data.dev.data.truncated, "train_examples": len(train_data),
        "train_trees": data.info.get("train_trees"),
        "mean_src_len": float(train_data.src_lens.mean()), "mean_tgt_len": float(train_data.tgt_lens.mean())})
    if is_main:
        # The run's own BPE model beside its weights: `python -m harness evaluate` reads text with it later
        atomic_write(out / "bpe.model", data.tokenizer.path.read_bytes())
        atomic_write(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        with atomic_writer(out / "dev_translations.txt") as f:
            for src, ref, hyp in list(zip(data.dev.src_text, data.dev.tgt_text, hyps))[:50]:
                f.write(f"SRC {src}\nREF {ref}\nHYP {hyp}\n\n")
    return metrics
