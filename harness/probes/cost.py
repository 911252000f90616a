"""Table 2's training-cost column, two ways.

The paper's method (§6.1, footnote 5): training time x number of GPUs x an assumed sustained
single-precision rate per GPU (9.5 TFLOPS for a P100). Ours: the model's FLOPs per training step, counted
(harness/probes/flops.py: two per multiply-add, backward = 2 x forward, for a step of 25 k source + 25 k
target tokens), times the number of steps. Their ratio is the utilization of that assumed rate which the
paper's runs imply. The paper's numbers come from harness/paper/tables.yaml.
"""

from __future__ import annotations

import json

from harness.paper import load_tables
from harness.probes.flops import count_analytic
from model import get_preset


def paper_method(hours: float, gpus: int, tflops: float) -> float:
    """Footnote 5: training time x GPUs x sustained single-precision FLOP/s per GPU."""
    return hours * 3600 * gpus * tflops * 1e12


def training_costs(batch: int = 1000, sentence_len: int = 25) -> list[dict]:
    """One entry per Transformer row of Table 2: the paper's cost, our recomputation of it, the counted
    model FLOPs over the whole schedule, and the implied utilization."""
    t2 = load_tables()["table2"]
    out = []
    for name, run in t2["training"].items():
        tflops = t2["gpu_tflops"][run["gpu"]]
        recomputed = paper_method(run["hours"], run["gpus"], tflops)
        step = count_analytic(get_preset(run["preset"]), batch, sentence_len, sentence_len)["step_flops"]
        counted = step * run["steps"]
        out.append({"model": name, "preset": run["preset"], "paper_cost": t2["rows"][name]["cost_en_de"],
                    "paper_method_recomputed": recomputed, "step_flops": step, "steps": run["steps"],
                    "counted_cost": counted, "implied_utilization": counted / recomputed,
                    "assumed_tflops_per_gpu": tflops, "gpus": run["gpus"], "hours": run["hours"],
                    "achieved_tflops_per_gpu": counted / (run["hours"] * 3600 * run["gpus"]) / 1e12})
    return out


def main(as_json: bool = False) -> int:
    rows = training_costs()
    if as_json:
        print(json.dumps(rows))
        return 0
    print("Table 2 training cost: the paper's method (time x GPUs x assumed TFLOPS) against counted model FLOPs "
          "(two per multiply-add; 25 k + 25 k tokens a step)")
    print(f"{'model':<26}{'paper':>10}{'recomputed':>12}{'FLOPs/step':>12}{'steps':>9}{'counted':>11}"
          f"{'utilization':>13}{'TFLOPS/GPU':>12}")
    for r in rows:
        print(f"{r['model']:<26}{r['paper_cost']:>10.1e}{r['paper_method_recomputed']:>12.2e}"
              f"{r['step_flops']:>12.3e}{r['steps']:>9}{r['counted_cost']:>11.2e}"
              f"{100 * r['implied_utilization']:>12.1f}%{r['achieved_tflops_per_gpu']:>12.2f}")
    print("utilization: counted FLOPs / (hours x GPUs x the footnote's sustained rate); TFLOPS/GPU: counted "
          "FLOPs per GPU-second actually implied by the paper's reported time.")
    return 0


def measured_update_seconds(model_cfg, train_cfg, device, sentence_len: int = 25, repeats: int = 3,
                            make_optimizer=None, autocast=None) -> float:
    """Seconds per optimizer update of this model at its schedule's batch, measured on `device`: the update's
    target tokens (train.batch_tokens, in micro-batches of train.max_tokens) as random sentences of
    sentence_len tokens each side, under `autocast` (the trainer's context, harness/train/device.py's `autocast_for`;
    None: none), the row's optimizer
    (make_optimizer(params, train_cfg), the trainer's; fused Adam when None); two warm-up updates, then the
    median of `repeats`. What `run --dry-run --measure` multiplies by each trial's steps. Any model family."""
    import contextlib
    import math
    import statistics
    import time

    import torch

    from model import build_model
    device = torch.device(device)
    torch.manual_seed(0)
    model = build_model(model_cfg).to(device).train()
    opt = make_optimizer(model.parameters(), train_cfg) if make_optimizer else \
        torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9, fused=True)
    for group in opt.param_groups:
        group["lr"] = 1e-4            # small: random tokens, and timing only
    accum = max(1, math.ceil(train_cfg.batch_tokens / train_cfg.max_tokens))
    rows = max(1, min(train_cfg.batch_tokens, train_cfg.max_tokens) // sentence_len)
    src = torch.randint(4, model_cfg.vocab_size, (rows, sentence_len), device=device)
    tgt = torch.randint(4, model_cfg.vocab_size, (rows, sentence_len + 1), device=device)
    amp = autocast() if autocast is not None else contextlib.nullcontext()

    def update() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(accum):
            with amp:
                loss, _, n = model.loss(src, tgt[:, :-1], tgt[:, 1:], train_cfg.label_smoothing)
            (loss / (n * accum)).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    for _ in range(2):
        update()
    return statistics.median(update() for _ in range(repeats))
