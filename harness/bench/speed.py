"""`python -m harness bench`: training-step and decoding speed of the core, beside torch.nn.Transformer with
the same shapes, batch and optimizer, in one run. Figures are medians over repeats after warm-up.

FLOPs are counted, not assumed: the analytic count of harness/probes/flops.py (two per multiply-add,
backward = 2 x forward), which fvcore and torch.utils.flop_counter reproduce exactly (tests/test_flops.py).
"""

from __future__ import annotations

import contextlib
import json
import statistics

import torch
import torch.nn.functional as F
from torch import nn

from harness.data.bpe import BOS, PAD  # the special ids of every tokenizer of the harness
from harness.errors import UserError
from harness.probes.flops import count_analytic
from harness.probes.peak import matmul_peak, timed
from harness.system import pin_allocator
from harness.train import COMPILE_MODES, TrainConfig, resolve_device, training_loss
from model import ConfigError, Transformer, TransformerConfig, beam_search, get_preset, greedy
from model.attention import Packed
from model.layers import sinusoid_table


class TorchTransformerPeer(nn.Module):
    """The same model built on torch.nn.Transformer (post-norm, ReLU): shared embeddings x sqrt(d_model),
    sinusoids, dropout, the tied pre-softmax projection, and a full-logits label-smoothed loss."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD)
        self.register_buffer("pos", sinusoid_table(cfg.max_len, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.p_drop)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff,
                                   dropout=cfg.p_drop, batch_first=True, layer_norm_eps=cfg.norm_eps)

    def loss(self, src, tgt_in, tgt_out, label_smoothing: float):
        # The padding test runs here, eagerly: inside a compiled body its .any() would break the graph.
        src_pad = (src == PAD) if bool((src == PAD).any()) else None
        return self.body(src, tgt_in, tgt_out, src_pad, label_smoothing)

    def body(self, src, tgt_in, tgt_out, src_pad, label_smoothing: float):
        def emb(x):
            return self.drop(self.embed(x) * self.cfg.d_model ** 0.5 + self.pos[:x.size(1)])
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=tgt_in.device)
        h = self.core(emb(src), emb(tgt_in), tgt_mask=causal, tgt_is_causal=True,
                      src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
        logits = F.linear(h, self.embed.weight).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD,
                               reduction="sum", label_smoothing=label_smoothing)


def synthetic_batch(n_sentences: int, length: int, vocab: int, device, seed: int = 0, vary: bool = False):
    """(src, tgt_in, tgt_out) of random tokens, every sentence `length` long, or with vary=True lengths drawn
    uniformly from 0.6 to 1.4 x length (15..35 for 25) and right-padded, as token batches are."""
    g = torch.Generator().manual_seed(seed)
    width = round(1.4 * length) if vary else length
    src = torch.randint(4, vocab, (n_sentences, width), generator=g)
    tgt = torch.randint(4, vocab, (n_sentences, width + 1), generator=g)
    if vary:
        lo = max(1, round(0.6 * length))
        src_lens = torch.randint(lo, width + 1, (n_sentences,), generator=g)
        tgt_lens = torch.randint(lo, width + 1, (n_sentences,), generator=g)
        src[torch.arange(width)[None] >= src_lens[:, None]] = PAD
        tgt[torch.arange(width + 1)[None] >= tgt_lens[:, None] + 1] = PAD   # tgt_in / tgt_out: length each
    return src.to(device), tgt[:, :-1].contiguous().to(device), tgt[:, 1:].contiguous().to(device)


def packed(batch):
    """The same sentences end to end without padding: ((1, N_src), (1, N_tgt), (1, N_tgt)) and their layouts."""
    src, tgt_in, tgt_out = batch
    real_src, real_tgt = src != PAD, tgt_out != PAD
    packing = (Packed.of(real_src.sum(1)), Packed.of(real_tgt.sum(1)))
    return (src[real_src][None], tgt_in[real_tgt][None], tgt_out[real_tgt][None]), packing


def training_step(model: nn.Module, loss_fn, batch, n_tgt: int, dtype, packing=None):
    """One training step as a closure: forward and summed loss (bf16 autocast when dtype is bf16), backward
    of the per-token mean, and a fused Adam update (§5.3's betas and epsilon)."""
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dtype == torch.bfloat16 else contextlib.nullcontext()
    extra = {"packing": packing} if packing is not None else {}

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_fn(*batch, 0.1, **extra)
        loss = loss[0] if isinstance(loss, tuple) else loss
        (loss / n_tgt).backward()
        opt.step()
    return step


def bench_training(cfg, device, dtype, batch, repeats, compile_models: bool, pack: bool = False,
                   compile_mode: str = "default") -> dict:
    n_tgt = int((batch[2] != PAD).sum())
    core = Transformer(cfg)
    # name: (model, loss function, its batch, packing). The core is compiled as `train` compiles it, for
    # static shapes here (the padded batch, and the packed one if timed).
    body = training_loss(core, TrainConfig(compile=compile_models, compile_mode=compile_mode), n_shapes=1 + pack)
    entrants = {"core": (core, body, batch, None)}
    if pack:
        packed_batch, packing = packed(batch)
        entrants["core (packed)"] = (core, entrants["core"][1], packed_batch, packing)
    peer = TorchTransformerPeer(cfg)
    if compile_models:
        peer.body = torch.compile(peer.body, mode=compile_mode)
    entrants["torch.nn.Transformer"] = (peer, peer.loss, batch, None)
    steps = {}
    # The analytic count (harness/probes/flops.py, which fvcore and torch's FlopCounterMode match exactly)
    # of the real tokens, sentence by sentence: padding is not work, and every entrant is credited alike.
    src_lens, tgt_lens = (batch[0] != PAD).sum(1).tolist(), (batch[2] != PAD).sum(1).tolist()
    flops = sum(count_analytic(cfg, 1, s, t)["step_flops"] for s, t in zip(src_lens, tgt_lens))
    for name, (model, loss_fn, args, packing) in entrants.items():
        steps[name] = training_step(model.to(device), loss_fn, args, n_tgt, dtype, packing)
    results = {name: [] for name in steps}
    for name, step in steps.items():          # warm-up (and compilation)
        for _ in range(3):
            step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    peak_mem = {}
    for _ in range(repeats):                  # interleaved, so drifts of the machine hit both alike
        for name, step in steps.items():
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            results[name].append(timed(step, device))
            if device.type == "cuda":
                peak_mem[name] = torch.cuda.max_memory_allocated(device)
    out = {}
    for name, times in results.items():
        t = statistics.median(times)
        out[name] = {"step_ms": t * 1e3, "tgt_tokens_per_s": n_tgt / t, "tflops": flops / t / 1e12,
                     "peak_mem_gib": peak_mem.get(name, 0) / 2 ** 30 if peak_mem else None}
    out["flops_per_step"] = flops
    out["target_tokens"] = n_tgt
    out["speedup_core_over_peer"] = out["core"]["tgt_tokens_per_s"] / out["torch.nn.Transformer"]["tgt_tokens_per_s"]
    if pack:
        out["speedup_packed_over_peer"] = (out["core (packed)"]["tgt_tokens_per_s"]
                                           / out["torch.nn.Transformer"]["tgt_tokens_per_s"])
    return out


@torch.no_grad()
def bench_decoding(cfg, device, dtype, n_sentences: int, src_len: int, out_len: int, repeats: int) -> dict:
    model = Transformer(cfg).to(device).eval()
    src = synthetic_batch(n_sentences, src_len, cfg.vocab_size, device)[0]
    extra = out_len - src_len                 # eos=-1 never fires: every output is exactly out_len tokens
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if dtype == torch.bfloat16 else None

    def run(fn):
        if amp is None:
            return fn()
        with amp():
            return fn()
    out = {}
    runs = {
        "greedy_cached": lambda: greedy(model, src, BOS, -1, max_extra=extra),
        "greedy_uncached": lambda: greedy(model, src, BOS, -1, max_extra=extra, use_cache=False),
        "beam4_cached": lambda: beam_search(model, src, BOS, -1, beam_size=4, max_extra=extra),
        "beam4_uncached": lambda: beam_search(model, src, BOS, -1, beam_size=4, max_extra=extra, use_cache=False),
    }
    if device.type == "cuda":                 # the cached steps above replay CUDA graphs; here launched one by one
        runs["greedy_cached_no_graph"] = lambda: greedy(model, src, BOS, -1, max_extra=extra, graph=False)
        runs["beam4_cached_no_graph"] = lambda: beam_search(model, src, BOS, -1, beam_size=4, max_extra=extra,
                                                            graph=False)
    for name, fn in runs.items():
        run(fn)
        t = statistics.median(timed(lambda: run(fn), device) for _ in range(max(1, repeats // 3)))
        out[name] = {"seconds": t, "tokens_per_s": n_sentences * out_len / t}
    out["beam4_cache_speedup"] = out["beam4_uncached"]["seconds"] / out["beam4_cached"]["seconds"]
    out["greedy_cache_speedup"] = out["greedy_uncached"]["seconds"] / out["greedy_cached"]["seconds"]
    if device.type == "cuda":
        out["beam4_graph_speedup"] = out["beam4_cached_no_graph"]["seconds"] / out["beam4_cached"]["seconds"]

    def first_token():
        memory, mask = model.encode(src)
        cache = model.new_cache(n_sentences, out_len, memory)
        model.decode_step(torch.full((n_sentences,), BOS, device=device), memory, mask, cache, 0).argmax(-1)
        return cache
    cache = run(first_token)
    out["time_to_first_token_ms"] = statistics.median(timed(lambda: run(first_token), device)
                                                      for _ in range(5)) * 1e3
    out["decode_step_ms"] = out["greedy_cached"]["seconds"] / out_len * 1e3
    per_token = sum(c.nbytes() for c, _ in cache) / (n_sentences * out_len)
    cross = cfg.n_dec_layers * cfg.n_kv_heads * (cfg.d_k + cfg.d_v) * src_len
    out["kv_cache_bytes_per_token"] = per_token
    out["cross_kv_bytes_per_sentence"] = cross * (2 if dtype == torch.bfloat16 else 4)
    out["output_len"], out["sentences"] = out_len, n_sentences
    return out


def run_bench(args) -> int:
    """One preset, or several (comma-separated: the GPU check runs cpu_d128,paper_base,paper_big in one go)."""
    presets = [p.strip() for p in args.preset.split(",") if p.strip()]
    for name in presets:
        try:
            get_preset(name)
        except ConfigError as err:
            raise UserError(str(err)) from None
    reports = [_bench_preset(name, args) for name in presets]
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports))
    return 0


def _bench_preset(preset: str, args) -> dict:
    cfg = get_preset(preset)
    device = resolve_device(args.device)
    if device.type == "cpu":
        pin_allocator()               # as `train` does, for both models alike
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if args.dtype == "auto":
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elif args.dtype in dtypes:
        dtype = dtypes[args.dtype]
    else:
        raise UserError(f"--dtype {args.dtype!r} is not known; use fp32, bf16 or auto.")
    if dtype == torch.bfloat16 and device.type != "cuda":
        raise UserError("--dtype bf16 is benchmarked on CUDA only (autocast); use fp32 on CPU.")
    if args.compile_mode not in COMPILE_MODES:
        raise UserError(f"--compile-mode {args.compile_mode!r} is not known; use one of {', '.join(COMPILE_MODES)}.")
    if args.repeats < 1 or args.sentence_len < 2 or args.decode_sentences < 0:
        raise UserError("--repeats must be at least 1, --sentence-len at least 2 and --decode-sentences at "
                        "least 0 (0: the device's default).")
    tokens = args.tokens or (25_000 if device.type == "cuda" else 4096)
    n_sent = max(1, tokens // args.sentence_len)
    torch.manual_seed(0)
    batch = synthetic_batch(n_sent, args.sentence_len, cfg.vocab_size, device, vary=args.vary)
    lengths = f"{round(0.6 * args.sentence_len)}..{round(1.4 * args.sentence_len)}" if args.vary else args.sentence_len
    report = {"preset": preset, "device": str(device), "dtype": str(dtype).replace("torch.", ""),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "batch": f"{n_sent} sentences x {lengths} source + target tokens"}
    report["matmul_peak_tflops"] = matmul_peak(device, dtype)
    report["training"] = bench_training(cfg, device, dtype, batch, args.repeats, False, args.pack)
    if args.compile:
        report["training_compiled"] = bench_training(cfg, device, dtype, batch, args.repeats, True, args.pack,
                                                     args.compile_mode)
    if not args.no_decode:
        n_dec = args.decode_sentences or (256 if device.type == "cuda" else 8)
        report["decoding"] = bench_decoding(cfg, device, dtype, n_dec, args.sentence_len, 100, args.repeats)
    if not args.json:
        _print(report)
    return report


def _print(r: dict) -> None:
    print(f"preset {r['preset']} | {r['device']} | {r['dtype']} | torch {r['torch']} | {r['threads']} threads "
          f"| batch {r['batch']}")
    peak = r["matmul_peak_tflops"]
    print(f"matmul peak (measured): {peak:.2f} TFLOP/s")
    for key in ("training", "training_compiled"):
        if key not in r:
            continue
        t = r[key]
        print(f"\n{key} (counted {t['flops_per_step'] / 1e9:.1f} GFLOP per step, {t['target_tokens']} target tokens)")
        print(f"  {'model':<22}{'step ms':>10}{'tgt tok/s':>12}{'TFLOP/s':>9}{'% peak':>8}{'peak GiB':>10}")
        for name in [n for n in ("core", "core (packed)", "torch.nn.Transformer") if n in t]:
            m = t[name]
            mem = f"{m['peak_mem_gib']:.2f}" if m["peak_mem_gib"] is not None else "n/a"
            print(f"  {name:<22}{m['step_ms']:>10.1f}{m['tgt_tokens_per_s']:>12,.0f}{m['tflops']:>9.3f}"
                  f"{100 * m['tflops'] / peak:>7.1f}%{mem:>10}")
        print(f"  core / torch.nn.Transformer: {t['speedup_core_over_peer']:.2f}x")
        if "speedup_packed_over_peer" in t:
            print(f"  core (packed) / torch.nn.Transformer: {t['speedup_packed_over_peer']:.2f}x")
    if "decoding" in r:
        d = r["decoding"]
        print(f"\ndecoding ({d['sentences']} sentences, {d['output_len']} output tokens each)")
        for name in [n for n in ("greedy_cached", "greedy_cached_no_graph", "greedy_uncached", "beam4_cached",
                                 "beam4_cached_no_graph", "beam4_uncached") if n in d]:
            print(f"  {name:<24}{d[name]['tokens_per_s']:>12,.0f} tok/s  ({d[name]['seconds']:.2f} s)")
        print(f"  KV cache speed-up: greedy {d['greedy_cache_speedup']:.1f}x, beam 4 {d['beam4_cache_speedup']:.1f}x"
              + (f"; beam 4 with CUDA graphs against without: {d['beam4_graph_speedup']:.1f}x"
                 if "beam4_graph_speedup" in d else ""))
        print(f"  time to first token {d['time_to_first_token_ms']:.1f} ms (prefill: encoder + first step); "
              f"decode step {d['decode_step_ms']:.2f} ms")
        print(f"  KV cache: {d['kv_cache_bytes_per_token']:.0f} bytes per generated token (self-attention), "
              f"{d['cross_kv_bytes_per_sentence']:,} bytes per sentence (cross-attention)")
