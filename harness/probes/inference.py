"""Inference cost by model shape: prefill and decode throughput, time to first token, peak memory and the KV
cache, measured (`python -m harness probe inference`; the study kind `inference` logs the same to MLflow).

Prefill and decode behave differently. The prefill (the encoder's pass, or the decoder-only model's pass over
the source) processes every source token at once: matmuls over many rows, compute-bound. A decoding step
processes one token a sentence and reads every weight and the whole cache for it: bound by memory traffic, which
the cache's size drives. The encoder-decoder's cross-attention cache is fixed by the source; its self-attention
cache, and the decoder-only model's whole cache, grow with every token.

Each point (a batch size and a source length) draws random source tokens (no padding), then, `repeats` times
after `warmup` untimed runs, times:
- the prefill: `model.encode(src)`;
- the decoding: `new_tokens` greedy steps through the same cached step beam search uses (on CUDA the captured
  graph where the family has one), the first step's time added to the prefill's for the time to first token;
and keeps each time's median. The cache's bytes are read from its tensors after the steps (the caches are
allocated for the whole decoding length at once) and stand beside the formula
2 x layers x tokens x kv_heads x head_dim x bytes (keys and values; head_dim d_k for keys, d_v for values).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from harness.probes.inference_spec import DEPTHS, WIDTHS, InferenceSpec, point_key
from harness.probes.manifest import manifest
from harness.system import peak_rss, reset_peak_rss

BOS, FIRST_TOKEN = 1, 4                # the harness's BOS id; random tokens from 4 up (past pad, BOS, EOS, UNK)


def model_config(spec: InferenceSpec):
    """The row's model config: the preset, the row's settings, then its widths and depths scaled."""
    from model import get_preset, to_dict, with_settings
    cfg = with_settings(get_preset(spec.preset), vocab_size=spec.vocab_size, **dict(spec.model))
    values = to_dict(cfg)
    scaled = {k: max(1, round(values[k] * spec.width)) for k in WIDTHS if k in values}
    if spec.depth != 1.0:
        given = dict(spec.model)
        scaled.update({k: max(1, round(values[k] * spec.depth)) for k in DEPTHS
                       if k in values and (k == "n_layers" or k in given)})
    return with_settings(cfg, **scaled) if scaled else cfg


def kv_formula(cfg, element_bytes: int) -> dict[str, int]:
    """Bytes per token by the formula: per target (generated) token the self-attention cache of every decoder
    layer, 2 x layers x kv_heads x head_dim x bytes (keys d_k, values d_v); per source token the
    encoder-decoder's cross-attention cache, or the decoder-only model's prefilled cache (the same per token)."""
    per_layer = cfg.n_kv_heads * (cfg.d_k + cfg.d_v) * element_bytes
    if getattr(cfg, "kv_cache_dtype", "model") == "int8":     # int8 numbers and a float16 scale a row (k and v)
        per_layer = cfg.n_kv_heads * (cfg.d_k + cfg.d_v) + 2 * cfg.n_kv_heads * 2
    layers = cfg.n_layers if cfg.family == "decoder_only" else cfg.n_dec_layers
    return {"kv_bytes_per_token": layers * per_layer, "kv_bytes_per_source_token": layers * per_layer}


def _cache_bytes(cache, family: str, batch: int, src_len: int, slots: int) -> tuple[float, float]:
    """(bytes per target token, bytes per source token) of one sentence, read from a decoding cache's tensors."""
    if family == "decoder_only":
        per = cache.nbytes() / (batch * (src_len + slots))
        return per, per
    self_bytes = sum(s.nbytes() for s, _ in cache)
    cross_bytes = sum(c.nbytes() for _, c in cache)
    return self_bytes / (batch * slots), cross_bytes / (batch * src_len)


class _PeakMemory:
    """Peak memory over a block: CUDA's allocator statistics, or on Linux the process's resident high-water
    mark, reset first (harness/system.py; None where neither is available)."""

    def __init__(self, device: torch.device):
        self.device, self.peak, self.ok = device, None, False

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.ok = reset_peak_rss()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
        elif self.ok:
            self.peak = peak_rss()
        return False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_point(model, cfg, batch: int, src_len: int, spec: InferenceSpec, device: torch.device) -> dict:
    """One (batch, source length) point: the medians of `repeats` timed runs, the peak memory and the cache."""
    from model.decode import _stepper  # the decoders' own step: eager, or the captured graph on CUDA
    g = torch.Generator().manual_seed(batch * 100_003 + src_len)
    src = torch.randint(FIRST_TOKEN, cfg.vocab_size, (batch, src_len), generator=g).to(device)
    graph = None if spec.graphs else False
    prefill, first, decode = [], [], []
    cache_bytes = (float("nan"), float("nan"))
    with torch.inference_mode(), _PeakMemory(device) as peak:
        for i in range(spec.warmup + spec.repeats):
            _sync(device)
            t0 = time.perf_counter()
            memory, mask = model.encode(src)
            _sync(device)
            t1 = time.perf_counter()
            cache, step = _stepper(model, memory, mask, batch, spec.new_tokens, True, graph)
            tokens = torch.full((batch, 1), BOS, dtype=torch.long, device=device)
            _sync(device)
            t2 = time.perf_counter()
            for t in range(spec.new_tokens):
                nxt = step(tokens, t).argmax(-1)
                tokens = torch.cat([tokens, nxt[:, None]], 1)
                if t == 0:
                    _sync(device)
                    t_first = time.perf_counter()
            _sync(device)
            t3 = time.perf_counter()
            if i >= spec.warmup:
                prefill.append(t1 - t0)
                first.append(t_first - t2)
                decode.append(t3 - t2)
            cache_bytes = _cache_bytes(cache, cfg.family, batch, src_len, spec.new_tokens)
    p, f, d = (statistics.median(x) for x in (prefill, first, decode))
    return {"batch": batch, "src_len": src_len, "prefill_s": p, "decode_s": d,
            "prefill_tok_s": batch * src_len / p, "decode_tok_s": batch * spec.new_tokens / d,
            "ttft_ms": 1000 * (p + f), "peak_mem_bytes": peak.peak,
            "kv_bytes_per_token": cache_bytes[0], "kv_bytes_per_source_token": cache_bytes[1]}


def measure(spec: InferenceSpec, on_point: Callable[[dict], None] | None = None) -> dict:
    """Every point of the row's grid, in order of batch then source length (on_point after each), with the
    shape's manifest, parameter count and the cache formula at the run's dtype."""
    from model import build_model, count_parameters, to_dict, with_settings
    spec.validate()
    device = torch.device("cuda" if spec.device == "auto" and torch.cuda.is_available() else
                          "cpu" if spec.device == "auto" else spec.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA device")
    dtype = torch.bfloat16 if spec.dtype == "bfloat16" else torch.float32
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(spec.threads)
    try:
        cfg = model_config(spec)
        cfg = cfg.replace(max_len=max(cfg.max_len, max(spec.src_lens) + spec.new_tokens + 1)) \
            if hasattr(cfg, "replace") else cfg
        torch.manual_seed(0)
        model = build_model(cfg).to(device=device, dtype=dtype).eval()
        points = []
        for batch in spec.batches:
            for src_len in spec.src_lens:
                point = measure_point(model, cfg, batch, src_len, spec, device)
                points.append(point)
                if on_point is not None:
                    on_point(point)
    finally:
        torch.set_num_threads(threads)
    element = torch.empty((), dtype=dtype).element_size()
    return {"points": points, "device": str(device), "dtype": spec.dtype, "threads": spec.threads,
            "params": count_parameters(model), "manifest": manifest(to_dict(cfg)),
            "formula": kv_formula(cfg, element), "model": to_dict(cfg),
            # the same shape with a key/value head for every query head, in the model's dtype: what GQA and MQA
            # (and an int8 cache) are measured against
            "formula_mha": kv_formula(with_settings(cfg, n_kv_heads=cfg.n_heads, kv_cache_dtype="model")
                                      if hasattr(cfg, "kv_cache_dtype") else
                                      with_settings(cfg, n_kv_heads=cfg.n_heads), element),
            "kv_heads_fraction": cfg.n_kv_heads / cfg.n_heads}


def flat_metrics(result: dict) -> dict:
    """The result as MLflow metrics: each point's figures with its `_b{batch}_s{len}` suffix, the formula, and what
    the claims read (summary_metrics)."""
    out: dict[str, float] = {"params": result["params"], **{f"{k}_formula": v for k, v in result["formula"].items()}}
    for p in result["points"]:
        suffix = point_key(p["batch"], p["src_len"])
        out.update({f"{k}{suffix}": p[k] for k in ("prefill_tok_s", "decode_tok_s", "ttft_ms", "peak_mem_bytes",
                                                   "kv_bytes_per_token", "kv_bytes_per_source_token")
                    if p[k] is not None})
    return {**out, **summary_metrics(result)}


def summary_metrics(result: dict) -> dict[str, float]:
    """The figures the claims read, from the points: decode tokens/s at the last point (the largest batch and
    the longest source); the cache per token measured there over the formula's with a key/value head for every
    query head (kv_fraction_of_mha), beside kv_heads_fraction = kv heads / query heads; and, at the longest source,
    how much each phase gains from the smallest batch to the largest, as a share of linear (batch_gain: 1 =
    throughput grows as the batch), and decode's gain over prefill's."""
    points = result["points"]
    last = points[-1]
    out = {"decode_tok_s_last": last["decode_tok_s"], "kv_heads_fraction": result["kv_heads_fraction"]}
    if result.get("formula_mha"):
        out["kv_fraction_of_mha"] = last["kv_bytes_per_token"] / result["formula_mha"]["kv_bytes_per_token"]
    longest = max(p["src_len"] for p in points)
    at = sorted((p for p in points if p["src_len"] == longest), key=lambda p: p["batch"])
    if len(at) >= 2 and at[-1]["batch"] > at[0]["batch"]:
        lo, hi = at[0], at[-1]
        grow = hi["batch"] / lo["batch"]
        out["decode_batch_gain"] = hi["decode_tok_s"] / lo["decode_tok_s"] / grow
        out["prefill_batch_gain"] = hi["prefill_tok_s"] / lo["prefill_tok_s"] / grow
        out["decode_over_prefill_gain"] = out["decode_batch_gain"] / out["prefill_batch_gain"]
    return out


def print_results(results: dict[str, dict], study: str, profile: str, new_tokens: int) -> None:
    """`probe inference`'s table: one line per row, batch and source length."""
    first = next(iter(results.values()))
    print(f"{study} ({profile}): inference cost by shape on {first['device']}, {first['dtype']}, "
          f"{first['threads']} threads; decode = {new_tokens} greedy steps")
    print(f"{'row':<14}{'params':>11}{'batch':>6}{'src':>6}{'prefill tok/s':>15}{'decode tok/s':>14}"
          f"{'TTFT ms':>9}{'peak MB':>9}{'KV B/tok':>10}{'formula':>9}{'KV B/src tok':>13}")
    for row, r in results.items():
        for p in r["points"]:
            peak = f"{p['peak_mem_bytes'] / 2**20:.0f}" if p["peak_mem_bytes"] else "–"
            print(f"{row:<14}{r['params']:>11,}{p['batch']:>6}{p['src_len']:>6}{p['prefill_tok_s']:>15,.0f}"
                  f"{p['decode_tok_s']:>14,.0f}{p['ttft_ms']:>9.1f}{peak:>9}{p['kv_bytes_per_token']:>10,.0f}"
                  f"{r['formula']['kv_bytes_per_token']:>9,}{p['kv_bytes_per_source_token']:>13,.0f}")
