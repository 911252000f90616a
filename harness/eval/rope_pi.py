"""RoPE position interpolation measured (Chen et al. 2023, "Extending Context Window of Large Language Models via
Positional Interpolation"): a RoPE model trained on sentences of at most L words is fine-tuned briefly on sentences
of up to F x L words twice from the same final weights, once plainly (positions as they are, past the angles it
trained on) and once with interpolation (position p turned as p / F, within them), the same steps, sentences and
rate each time; both are then scored on §3.5's length buckets (harness/eval/extrapolation.py) and the weights are
put back as they were.

The fine-tuning sentences come from a random stream of the corpus's grammar that no split, contrast set or length
bucket uses (harness/data/synth/probes.py, FINETUNE_STREAM); the rate is the run's own at its last step (the noam
schedule's tail), Adam with the paper's betas, dropout and label smoothing as in training."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from harness.data.batching import ParallelData, token_batches
from harness.data.corpus import DataConfig
from harness.eval.extrapolation import length_metrics


def set_rope_scale(model, scale: float) -> None:
    """Every rotary layer of `model` (and its config) turns position p as p / scale from now on."""
    from model.layers import Rotary
    for m in model.modules():
        if isinstance(m, Rotary):
            m.set_scale(scale)
    model.cfg = model.cfg.replace(rope_scale=scale) if hasattr(model.cfg, "replace") else model.cfg


def finetune(model, data: ParallelData, steps: int, lr: float, max_tokens: int, device, autocast,
             label_smoothing: float, seed: int) -> None:
    """`steps` updates of Adam (betas 0.9, 0.98, eps 1e-9, as §5.3) at rate lr over batches of data, shuffled."""
    batches = token_batches(data.src_lens, data.tgt_lens, max_tokens)
    order = np.random.default_rng(seed).permutation(len(batches))
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    for step in range(steps):
        b = data.collate(batches[order[step % len(order)]]).to(device)
        with autocast():
            loss, _, n = model.loss(b.src, b.tgt_in, b.tgt_out, label_smoothing=label_smoothing)
        (loss / max(n, 1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()


def pi_metrics(model, tokenizer, data_cfg: DataConfig, *, steps: int, factor: float, sentences: int,
               per_bucket: int, lr: float, max_tokens: int, label_smoothing: float, device, autocast,
               beam_size: int, alpha: float, max_extra: int, lang: str, moses: str) -> dict[str, float]:
    """pi_plain_b{i}_{ppl,bleu,agree} and pi_interp_b{i}_... (the length buckets after each fine-tune), and
    pi_gain_b{i}_nll = ln PPL plain - ln PPL interpolated (> 0: interpolation extrapolates better)."""
    from harness.data.synth import FINETUNE_STREAM, length_buckets, synth_config
    top = int(factor * data_cfg.max_words)
    pairs = length_buckets(sentences, data_cfg.seed, synth_config(data_cfg), [(1, top)], stream=FINETUNE_STREAM)[0]
    src, tgt = tokenizer.encode(pairs.src), tokenizer.encode(pairs.tgt)
    keep = [i for i in range(len(src)) if len(src[i]) + 1 < model.cfg.max_len and len(tgt[i]) + 1 < model.cfg.max_len]
    data = ParallelData([src[i] for i in keep], [tgt[i] for i in keep])
    start = copy.deepcopy(model.state_dict())
    out: dict[str, float] = {"pi_finetune_pairs": len(keep), "pi_factor": factor, "pi_steps": steps}
    try:
        for mode, scale in (("plain", 1.0), ("interp", factor)):
            model.load_state_dict(start)
            set_rope_scale(model, scale)
            finetune(model, data, steps, lr, max_tokens, device, autocast, label_smoothing, data_cfg.seed)
            scored = length_metrics(model, tokenizer, data_cfg, per_bucket, device, beam_size=beam_size, alpha=alpha,
                                    max_extra=max_extra, max_tokens=max_tokens, autocast=autocast, lang=lang,
                                    moses=moses)
            out.update({f"pi_{mode}_{k[len('len_'):]}": v for k, v in scored.items()})
    finally:
        model.load_state_dict(start)
        set_rope_scale(model, 1.0)
    for key in [k for k in out if k.startswith("pi_plain_") and k.endswith("_ppl")]:
        b = key[len("pi_plain_"):-len("_ppl")]
        plain, interp = out[key], out.get(f"pi_interp_{b}_ppl", math.nan)
        if plain > 0 and interp > 0:
            out[f"pi_gain_{b}_nll"] = math.log(plain) - math.log(interp)
    return out
