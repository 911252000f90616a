"""`python -m harness bench --study STUDY --row ROW [--profile P]`: one study row's training step at its own
shapes, as its trial would train: the row's model, the trial's batches drawn from its data (batch tokens,
gradient accumulation, vocabulary), its thread count, the same optimizer and loss function. Reported:

- the step time (median over the timed steps) and target tokens/s;
- the counted FLOPs of the real batches (harness/probes/flops.py) and their share of this machine's matmul
  peak in the same dtype and threads (harness/probes/peak.py);
- where the step's time goes, from torch.profiler: each operator's own time in the training thread, by part
  (`PARTS`); what no operator accounts for is Python, dispatch and waiting (the parts add up to the step);
- beside it, on one of the row's own batches: torch.nn.Transformer where the row is a model it can
  build, and the core compiled (`--compile`).
"""

from __future__ import annotations

import statistics
import threading
import time

import torch

from harness.data.bpe import PAD
from harness.data.corpus import DataConfig
from harness.probes.flops import count_analytic
from harness.probes.peak import matmul_peak
from harness.train import BatchStream, TrainConfig, autocast_for, train_step, training_loss
from harness.train.config import rate_at
from harness.train.device import matmul_dtype
from harness.train.loop import setup

# Parts of a step, by the operator's own name (first match wins), or by the scope it runs in (`SCOPES`).
PARTS = {
    "matmul: projections, FFN, vocabulary": ("aten::mm", "aten::addmm", "aten::_addmm_activation"),
    "matmul: attention (QK^T, AV)": ("aten::bmm", "aten::baddbmm"),
    "attention kernel (SDPA)": ("scaled_dot_product", "flash_attention", "efficient_attention"),
    "softmax": ("softmax",),
    "norms": ("layer_norm", "rms_norm"),
    "dropout": ("aten::uniform_", "aten::bernoulli_", "aten::native_dropout", "aten::rand_like"),
    "embedding": ("aten::embedding",),
    "optimizer": ("adam",),
}
# Scopes: every operator inside one of these (forward or backward) counts to its part, matmuls excepted.
SCOPES = {"data": "data (next batch)", "optimizer": "optimizer", "LinearCrossEntropy": "loss",
          "ShortSoftmax": "softmax", "NativeLayerNormBackward": "norms", "RmsNormBackward": "norms"}
OTHER = "element-wise and other operators"
OUTSIDE = "Python, dispatch and waiting (no operator)"
MATMULS = ("matmul: projections, FFN, vocabulary", "matmul: attention (QK^T, AV)")


def part_of(name: str) -> str | None:
    """The part an operator's own name puts it in, or None."""
    low = name.lower()
    for part, keys in PARTS.items():
        if any(k.lower() in low for k in keys):
            return part
    return None


def _scope(event) -> str | None:
    """The part of the innermost enclosing scope (SCOPES) of a profiler event, or None."""
    node = event.cpu_parent
    while node is not None:
        for key, part in SCOPES.items():
            if key in node.name:
                return part
        node = node.cpu_parent
    return None


def split_by_part(events, thread: int, wall_us: float) -> dict[str, float]:
    """Microseconds by part for the profiler events of one thread, adding up to wall_us: each operator's own
    time (its children's excluded) to its part; the rest of the wall time to OUTSIDE."""
    out: dict[str, float] = {}
    for e in events:
        if e.thread != thread or e.self_cpu_time_total <= 0:
            continue
        own = part_of(e.name)
        scope = None if own in MATMULS else _scope(e)
        if scope is None and any(key in e.name for key in SCOPES):
            scope = SCOPES[next(key for key in SCOPES if key in e.name)]
        part = scope or own or OTHER
        out[part] = out.get(part, 0.0) + e.self_cpu_time_total
    out[OUTSIDE] = max(0.0, wall_us - sum(out.values()))
    return out


def top_operators(events, thread: int, steps: int, n: int = 12) -> list[dict]:
    """The n operators of one thread with the most own time: name, part, ms and calls per step."""
    own: dict[str, list] = {}
    for e in events:
        if e.thread == thread:
            entry = own.setdefault(e.name, [0.0, 0])
            entry[0] += e.self_cpu_time_total
            entry[1] += 1
    ranked = sorted(own.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"op": name, "part": part_of(name) or "", "ms": us / steps / 1e3, "calls": calls / steps}
            for name, (us, calls) in ranked]


def _step_flops(cfg, micro: list) -> float:
    """Counted training FLOPs of one update's real tokens, sentence by sentence (padding is not work)."""
    total = 0.0
    for b in micro:
        src_lens, tgt_lens = (b.src != PAD).sum(1).tolist(), (b.tgt_out != PAD).sum(1).tolist()
        total += sum(count_analytic(cfg, 1, s, t)["step_flops"] for s, t in zip(src_lens, tgt_lens))
    return total


class _Trainer:
    """The trial's training step, set up by harness/train/loop.py's `setup` (device, data, seeded model,
    optimizer) with the loop's batch stream, loss function and autocast, without a run directory."""

    def __init__(self, model_cfg, train_cfg: TrainConfig, data_cfg: DataConfig):
        self.cfg = train_cfg
        self.device, data, _, self.model, self.opt = setup(model_cfg, train_cfg, data_cfg, None, None)
        self.model_cfg = self.model.cfg
        self.stream = BatchStream(data.train.data, train_cfg, self.device, where=str(data.root))
        self.loss_fn = training_loss(self.model, train_cfg, n_shapes=self.stream.n_shapes)
        self.autocast = autocast_for(self.device, train_cfg.amp, train_cfg.cpu_amp)
        self.step_no, self.last_micro = 0, []
        self.model.train()

    def step(self) -> tuple[float, int]:
        """One update: (seconds, target tokens); its micro-batches are kept in `last_micro`."""
        t0 = time.perf_counter()
        with torch.profiler.record_function("data"):
            micro = self.stream.next_update()
        lr = rate_at(self.step_no + 1, self.cfg, self.model.cfg.d_model)
        _, n_tokens = train_step(self.model, self.opt, self.loss_fn, micro, lr, self.cfg.label_smoothing,
                                 self.device, self.autocast)
        with torch.profiler.record_function("optimizer"):
            if self.cfg.clip_norm:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
            self.opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step_no += 1
        self.last_micro = micro
        return time.perf_counter() - t0, n_tokens


def bench_row(model_cfg, train_cfg: TrainConfig, data_cfg: DataConfig, threads: int, steps: int = 30,
              warmup: int = 10, profiled: int = 10, compare: bool = True, compile_core: bool = False) -> dict:
    """The row's step timed and split (module doc); `threads`: the trial's torch threads."""
    torch.set_num_threads(threads)
    t = _Trainer(model_cfg, train_cfg, data_cfg)
    with t.stream.start():
        for _ in range(warmup):
            t.step()
        times, tokens, flops = [], [], []
        for _ in range(steps):
            dt, n = t.step()
            times.append(dt)
            tokens.append(n)
            flops.append(_step_flops(t.model_cfg, t.last_micro))
        main = threading.get_native_id()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(profiled):
                t.step()
            wall_us = (time.perf_counter() - t0) * 1e6
    events = prof.events()
    thread = _training_thread(events, main)
    split = split_by_part(events, thread, wall_us)
    step_s = statistics.median(times)
    dtype = matmul_dtype(t.device, train_cfg)
    peak = matmul_peak(t.device, dtype)
    achieved = sum(flops) / sum(times) / 1e12
    out = {"device": str(t.device), "dtype": str(dtype).replace("torch.", ""), "threads": threads,
           "step_ms": step_s * 1e3, "tgt_tokens_per_s": sum(tokens) / sum(times), "tgt_tokens_per_step":
           statistics.mean(tokens), "micro_batches": t.stream.accum, "flops_per_step": statistics.mean(flops),
           "tflops": achieved, "peak_tflops": peak, "share_of_peak": achieved / peak if peak else None,
           "params": sum(p.numel() for p in t.model.parameters()), "vocab_size": t.model_cfg.vocab_size,
           "steps_timed": steps, "steps_profiled": profiled,
           "profiled_step_ms": wall_us / profiled / 1e3,
           "split_ms": {part: us / profiled / 1e3 for part, us in sorted(split.items(), key=lambda kv: -kv[1])},
           "top_operators": top_operators(events, thread, profiled),
           # The floor: the counted FLOPs at the peak, every other operator gone. A step cannot fall below it
           # in this dtype; step / floor bounds what any change short of a faster dtype can win.
           "floor_ms": statistics.mean(flops) / (peak * 1e12) * 1e3 if peak else None}
    if compare:
        out["same_shape"] = _same_shape(t, compile_core)
    return out


def _training_thread(events, native_id: int) -> int:
    """The profiler's id of the thread that ran the steps: the one that recorded the `optimizer` scopes."""
    for e in events:
        if e.name == "optimizer":
            return e.thread
    return native_id


def peer_can_build(cfg) -> bool:
    """Whether torch.nn.Transformer is this model: post-norm LayerNorm, ReLU, sinusoids, d_k = d_v = d_model / h,
    one K/V head per query head."""
    plain = dict(norm_position="post", norm="layer", ffn="relu", positional="sinusoid", p_attn_drop=0.0,
                 word_positions=False, family="transformer")
    return all(getattr(cfg, k, None) == v for k, v in plain.items()) and \
        cfg.d_k == cfg.d_v == cfg.d_model // cfg.n_heads and cfg.n_kv_heads == cfg.n_heads and \
        cfg.n_enc_layers == cfg.n_dec_layers


def _same_shape(t: _Trainer, compile_core: bool) -> dict:
    """The bench's comparison (harness/bench/speed.py) on the row's last micro-batch itself: the core against
    torch.nn.Transformer where it can build the row, then (compile_core) both compiled."""
    from harness.bench.speed import bench_training
    b = t.last_micro[0].to(t.device)
    batch = (b.src, b.tgt_in, b.tgt_out)
    rows, width = b.src.size(0), b.tgt_out.size(1)
    out = {"rows": rows, "width": width}
    if not peer_can_build(t.model_cfg):
        out["peer"] = "torch.nn.Transformer cannot build this row"
        return out
    eager = bench_training(t.model_cfg, t.device, torch.float32, batch, repeats=10, compile_models=False)
    out["eager"] = {k: eager[k] for k in ("core", "torch.nn.Transformer", "speedup_core_over_peer")}
    if compile_core:
        compiled = bench_training(t.model_cfg, t.device, torch.float32, batch, repeats=10, compile_models=True)
        out["compiled"] = {k: compiled[k] for k in ("core", "torch.nn.Transformer", "speedup_core_over_peer")}
    return out


def print_row(r: dict, title: str) -> None:
    """The figures of `bench_row` as a person reads them."""
    peak = f"{100 * r['share_of_peak']:.0f} %" if r["share_of_peak"] else "-"
    print(f"{title}: {r['params'] / 1e6:.2f} M parameters, vocabulary {r['vocab_size']}, "
          f"{r['tgt_tokens_per_step']:.0f} target tokens a step in {r['micro_batches']} micro-batch(es); "
          f"{r['device']} {r['dtype']}, {r['threads']} thread(s)")
    print(f"step {r['step_ms']:.1f} ms (median of {r['steps_timed']}): {r['tgt_tokens_per_s']:,.0f} target tokens/s; "
          f"{r['flops_per_step'] / 1e9:.2f} GFLOP a step counted, {1e3 * r['tflops']:.1f} GFLOP/s = {peak} of this "
          f"machine's {r['dtype']} matmul peak ({1e3 * r['peak_tflops']:.0f} GFLOP/s with these threads)")
    if r.get("floor_ms"):
        print(f"floor: the counted FLOPs alone take {r['floor_ms']:.1f} ms a step at that peak, so no change short of "
              f"a faster dtype makes this step more than {r['step_ms'] / r['floor_ms']:.2f}x faster")
    total = sum(r["split_ms"].values())
    print(f"where a step's time goes (torch.profiler, {r['steps_profiled']} steps, {r['profiled_step_ms']:.1f} ms a "
          "step under the profiler; each operator's own time in the training thread):")
    for part, ms in r["split_ms"].items():
        print(f"  {part:<44}{ms:>8.2f} ms {100 * ms / total:>5.1f} %")
    print(f"  {'total':<44}{total:>8.2f} ms")
    print("the operators with the most own time, a step:")
    for o in r["top_operators"]:
        print(f"  {o['op'][:52]:<54}{o['ms']:>7.2f} ms {o['calls']:>6.0f} calls  {o['part']}")
    same = r.get("same_shape")
    if not same:
        return
    print(f"the same batch ({same['rows']} sentences, targets padded to {same['width']}), step alone:", end=" ")
    if "eager" not in same:
        print(same["peer"])
        return
    for mode in ("eager", "compiled"):
        if mode in same:
            m = same[mode]
            print(f"{mode}: core {m['core']['tgt_tokens_per_s']:,.0f} tokens/s, torch.nn.Transformer "
                  f"{m['torch.nn.Transformer']['tgt_tokens_per_s']:,.0f} (core {m['speedup_core_over_peer']:.2f}x)",
                  end="; " if mode == "eager" and "compiled" in same else "\n")
