"""`python -m harness.gpu_check --out DIR`: checks a GPU against the CPU in one command, within about five minutes.

It needs torch, sentencepiece and sacrebleu only (no Ray, MLflow, fvcore, PyYAML or pytest), runs its steps
in order within a time budget (default 290 s; a step that would start past it is skipped and listed), and
writes DIR/gpu_check.json (every figure) and DIR/gpu_check.md (the summary it also prints):

1. parity on the device: the core's loss and gradients there against the CPU's (fp32, same weights); the
   packed layout (flash varlen under bf16) against the padded one; cached decoding replayed from a
   captured CUDA graph against the same steps launched one by one.
   Then a profile: the busiest kernels of three paper_base training steps (eager, bf16), the table to
   read when a target is missed.
2. bench: training steps of the core and of torch.nn.Transformer, eager and compiled, on the issue's batch
   (1000 sentences x 25 tokens) with decoding with and without the KV cache, for paper_base and paper_big;
   then eager, on padded sentences of 15..35 tokens, the core padded, the core packed (varlen) and the
   peer; then cpu_d128. Compilation dominates the time, so the compiled runs come first and the rest follow
   as the budget allows.
3. training: the cpu_d128 preset on the made-up corpus, packed, then compiled with shape buckets (graphs per
   shape, step time).

On a CPU (`--device cpu --quick`) it runs the same steps small: that is how the tests keep it working.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from harness.bench.speed import PAD, _bench_preset, packed, synthetic_batch, training_step
from harness.data.corpus import DataConfig
from harness.io import atomic_write
from harness.probes.peak import sync
from harness.train import TRAIN_PRESETS, TrainConfig, resolve_device, train, training_loss
from model import Transformer, beam_search, get_preset, greedy
from model.cuda_graph import StepGraph
from model.decoder_only import DecoderOnly, DecoderOnlyConfig


def _parity(device: torch.device) -> dict:
    """The same weights and batch on the CPU and on the device, fp32: loss and largest gradient difference;
    then bf16 hidden states of a packed batch against the padded batch's."""
    cfg = get_preset("cpu_d128").replace(vocab_size=1000, p_drop=0.0)
    torch.manual_seed(0)
    batch = synthetic_batch(32, 25, cfg.vocab_size, "cpu", vary=True)
    results = {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        model = Transformer(cfg).to(where)
        loss, _, _ = model.loss(*(t.to(where) for t in batch), 0.1)
        loss.backward()
        results[str(where)] = (loss.item(), [p.grad.cpu() for p in model.parameters()])
    (l_cpu, g_cpu), (l_dev, g_dev) = results["cpu"], results[str(device)]
    out = {"loss_cpu": l_cpu, "loss_device": l_dev, "loss_rel_diff": abs(l_cpu - l_dev) / abs(l_cpu),
           "grad_max_abs_diff": max((a - b).abs().max().item() for a, b in zip(g_cpu, g_dev))}
    model = model.eval()
    dev_batch = tuple(t.to(device) for t in batch)
    (src, tgt_in, _), packing = packed(dev_batch)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))
    with torch.no_grad(), autocast:
        padded_h = model.hidden(dev_batch[0], dev_batch[1])[dev_batch[2] != 0]
        packed_h = model.hidden(src, tgt_in, tuple(p.to(device) for p in packing))[0]
    out["packed_vs_padded_max_abs_diff"] = (packed_h.float() - padded_h.float()).abs().max().item()
    out["varlen_kernel"] = model.kernels.varlen                     # chosen for the device, not given up
    out["varlen_failure"] = model.kernels.varlen_failure
    out.update(_decoding_parity(device))
    out["ok"] = (out["loss_rel_diff"] < 1e-4 and out["grad_max_abs_diff"] < 1e-3
                 and out["packed_vs_padded_max_abs_diff"] < 0.1 and out["graph_logits_max_abs_diff"] < 1e-3
                 and out["graph_greedy_equal"] and out["graph_beam_equal"]
                 and out["decoder_only_graph_logits_max_abs_diff"] < 1e-3
                 and out["decoder_only_graph_greedy_equal"] and out["decoder_only_graph_beam_equal"])
    return out


@torch.no_grad()
def _decoding_parity(device: torch.device) -> dict:
    """fp32: the logits of a captured step graph (`StepGraph`) against ordinary cached steps over 30
    positions, and greedy and beam outputs with and without graphs; for the core (keys `graph_*`) and for a
    decoder-only model of the redesign's shape (keys `decoder_only_graph_*`: pre-norm RMSNorm, RoPE, SwiGLU,
    2 key/value heads), whose cache holds the prefilled source before the target."""
    cfg = get_preset("cpu_d128").replace(vocab_size=1000, p_drop=0.0)
    out = _graph_parity(device, lambda: Transformer(cfg), cfg.vocab_size, "graph")
    do_cfg = DecoderOnlyConfig(vocab_size=1000, d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff,
                               n_layers=2 * cfg.n_layers, p_drop=0.0, positional="rope", norm_position="pre",
                               norm="rms", ffn="swiglu", n_kv_heads=2)
    out.update(_graph_parity(device, lambda: DecoderOnly(do_cfg), do_cfg.vocab_size, "decoder_only_graph"))
    return out


def _graph_parity(device: torch.device, build, vocab_size: int, key: str) -> dict:
    torch.manual_seed(0)
    model = build().to(device).eval()
    src = synthetic_batch(16, 20, vocab_size, "cpu", vary=True)[0].to(device)
    prefix = torch.randint(4, vocab_size, (16, 30)).to(device)
    memory, mask = model.encode(src)
    cache = model.new_cache(16, 30, memory)
    step = StepGraph(model, memory, mask, model.new_cache(16, 30, memory))
    diff = max((step(prefix[:, t], t) - model.decode_step(prefix[:, t], memory, mask, cache, t)).abs().max().item()
               for t in range(30))
    return {f"{key}_captured": step.graph is not None, f"{key}_logits_max_abs_diff": diff,
            f"{key}_greedy_equal": greedy(model, src, 2, 3, max_extra=10) == greedy(model, src, 2, 3, max_extra=10,
                                                                                    graph=False),
            f"{key}_beam_equal": beam_search(model, src, 2, 3, max_extra=10) == beam_search(model, src, 2, 3,
                                                                                         max_extra=10, graph=False)}


def _profile(preset: str, device: torch.device, quick: bool) -> dict:
    """The device's busiest operators and kernels over three training steps of the core (eager, bf16 on
    CUDA) on the bench's batch of 25-token sentences, after three steps of warm-up."""
    from torch.profiler import ProfilerActivity, profile
    cfg = get_preset(preset)
    torch.manual_seed(0)
    batch = synthetic_batch((256 if quick else 25_000) // 25, 25, cfg.vocab_size, device)
    model = Transformer(cfg).to(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    step = training_step(model, training_loss(model, TrainConfig(), n_shapes=1), batch,
                         int((batch[2] != PAD).sum()), dtype)
    for _ in range(3):
        step()
    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(3):
            step()
        sync(device)
    wall = (time.perf_counter() - t0) / 3
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=60)
    return {"preset": preset, "step_ms_profiled": wall * 1e3, "table": table}


def _bench(preset: str, device: str, quick: bool, vary: bool) -> dict:
    """Fixed lengths: eager and compiled, with decoding. Varied lengths: eager, padded against packed."""
    args = argparse.Namespace(device=device, dtype="auto", tokens=256 if quick else 0, sentence_len=25,
                              repeats=2 if quick else 8, compile=not (quick or vary), compile_mode="default",
                              vary=vary, pack=vary, no_decode=vary, decode_sentences=4 if quick else 0, json=True)
    return _bench_preset(preset, args)


def _train(out: Path, device: str, quick: bool, **overrides) -> dict:
    import dataclasses
    steps = 20 if quick else 300
    cfg = dataclasses.replace(TRAIN_PRESETS["cpu_d128"], steps=steps, warmup=max(steps // 5, 1), log_every=10,
                              checkpoint_every=0, bleu_sentences=20 if quick else 200, device=device, **overrides)
    data = DataConfig(train_pairs=2000 if quick else 20_000, dev_pairs=100, test_pairs=100,
                      cache_dir=str(out / "data"))
    model = get_preset("cpu_d128").replace(p_drop=0.1)
    metrics = train(model, cfg, data, out / ("run_" + "_".join(f"{k}" for k in overrides)), quiet=True)
    keep = ("steps", "train_seconds", "step_time_s", "tokens_per_s", "padding_fraction", "batch_shapes",
            "compiled_graphs", "dev_ppl", "dev_bleu")
    return {k: metrics.get(k) for k in keep}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.gpu_check", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, default=argparse.SUPPRESS,   # required: no default shown
                        help="directory for gpu_check.json and .md")
    parser.add_argument("--device", default="auto", help="auto | cuda | cpu")
    parser.add_argument("--budget-s", type=float, default=290.0, help="skip steps that would start after this")
    parser.add_argument("--quick", action="store_true", help="small shapes, cpu_d128 only, no compile (CPU tests)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    presets = ["cpu_d128"] if args.quick else ["paper_base", "paper_big"]
    steps = [("parity", lambda: _parity(device)),
             ("profile", lambda: _profile("cpu_d128" if args.quick else "paper_base", device, args.quick))]
    for vary in (False, True):
        for preset in presets:
            label = f"bench {preset}" + (" varied lengths" if vary else "")
            steps.append((label, lambda p=preset, v=vary: _bench(p, str(device), args.quick, vary=v)))
    if not args.quick:
        steps.append(("bench cpu_d128", lambda: _bench("cpu_d128", str(device), False, vary=False)))
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))        # corpus and runs: not results, not kept
    steps.append(("train cpu_d128 packed", lambda: _train(work, str(device), args.quick, pack=True)))
    steps.append(("train cpu_d128 compiled, shape buckets",
                  lambda: _train(work, str(device), args.quick, compile=not args.quick, shape_buckets=True)))
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "steps": {}, "skipped": [], "failed": {}}
    start = time.perf_counter()
    for name, fn in steps:
        if time.perf_counter() - start > args.budget_s:
            report["skipped"].append(name)
            continue
        t0 = time.perf_counter()
        try:
            report["steps"][name] = {"seconds": None, **fn()}
        except Exception as err:           # one failing step must not hide the others' figures
            report["failed"][name] = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=5)}"
        if name in report["steps"]:
            report["steps"][name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"[{time.perf_counter() - start:6.1f} s] {name}: {'failed' if name in report['failed'] else 'done'}",
              file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    report["total_seconds"] = round(time.perf_counter() - start, 1)
    atomic_write(args.out / "gpu_check.json", json.dumps(report, indent=2, default=str) + "\n")
    summary = _summary(report)
    atomic_write(args.out / "gpu_check.md", summary)
    print(summary)
    return 1 if report["failed"] else 0


def _summary(r: dict) -> str:
    lines = [f"# GPU check: {r['device']}, torch {r['torch']}, {r['total_seconds']} s", ""]
    parity = r["steps"].get("parity")
    if parity:
        lines.append(f"parity ok: {parity['ok']} (loss rel diff {parity['loss_rel_diff']:.1e}, grad max diff "
                     f"{parity['grad_max_abs_diff']:.1e}, packed vs padded "
                     f"{parity['packed_vs_padded_max_abs_diff']:.1e}, "
                     f"varlen kernel {parity['varlen_kernel']})")
        for key, name in (("graph", "the core"), ("decoder_only_graph", "decoder-only (redesign shape)")):
            lines.append(f"decoding with CUDA graphs, {name}: captured {parity[f'{key}_captured']}, logits max "
                         f"diff {parity[f'{key}_logits_max_abs_diff']:.1e}, greedy equal "
                         f"{parity[f'{key}_greedy_equal']}, beam equal {parity[f'{key}_beam_equal']}")
    lines += ["", "| step | entrant | step ms | tgt tok/s | % of matmul peak | x torch.nn.Transformer |",
              "|---|---|---|---|---|---|"]
    for name, res in r["steps"].items():
        for key in ("training", "training_compiled"):
            t = res.get(key) if isinstance(res, dict) else None
            if not t:
                continue
            peer = t["torch.nn.Transformer"]["tgt_tokens_per_s"]
            for entrant in ("core", "core (packed)", "torch.nn.Transformer"):
                if entrant in t:
                    m = t[entrant]
                    lines.append(f"| {name} {key.replace('training', '').strip('_') or 'eager'} | {entrant} | "
                                 f"{m['step_ms']:.1f} | {m['tgt_tokens_per_s']:,.0f} | "
                                 f"{100 * m['tflops'] / res['matmul_peak_tflops']:.1f} | "
                                 f"{m['tgt_tokens_per_s'] / peer:.2f} |")
        d = res.get("decoding") if isinstance(res, dict) else None
        if d:
            graphs = f", of which CUDA graphs {d['beam4_graph_speedup']:.1f}x" if "beam4_graph_speedup" in d else ""
            lines.append(f"| {name} decoding ({d['sentences']} sentences) | beam 4 cache speed-up "
                         f"{d['beam4_cache_speedup']:.1f}x{graphs}, greedy {d['greedy_cache_speedup']:.1f}x | | | | |")
    for name, res in r["steps"].items():
        if name.startswith("train"):
            lines.append(f"\n{name}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                 for k, v in res.items()))
    profile = r["steps"].get("profile")
    if profile:
        lines += [f"\nprofile of {profile['preset']} (eager core, {profile['step_ms_profiled']:.1f} ms a step "
                  "under the profiler):", "```", profile["table"].rstrip(), "```"]
    for name, why in r["failed"].items():
        lines.append(f"\nFAILED {name}: {why.splitlines()[0]}")
    if r["skipped"]:
        lines.append(f"\nskipped (over budget): {', '.join(r['skipped'])}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
