"""The paper's statements in its text, measured (studies/statements.yaml; what each row measures is said in
harness/probes/statement_spec.py).

Timing is Table 1's (harness/probes/scaling.py): one intra-op thread on a CPU by default, each point the fastest of
`repeats` blocks of calls, forward + backward with a gradient of ones. A trial measures once; its seeds are
repeats of the whole measurement, so a claim's interval over seeds is the interval over repeats.

FLOPs are counted by torch's FlopCounterMode (matmuls, batched matmuls and convolutions, forward and backward),
not written down: the counter sees what the layer runs. It does not see inside the CPU's fused attention kernel,
so self-attention's FLOPs are counted on the same arithmetic written as matmuls (scaling.py's `plain` layer, or the
model's `explicit` attention kernel), and its time is measured on the fused kernel a user gets.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from harness.probes.scaling import _best_time, _OpRecorder, _torch_threads, make_layer
from harness.probes.scaling_spec import fit_exponent
from harness.probes.statement_spec import StatementSpec
from harness.system import resolve_device

Point = Callable[[dict], None]


def forward_flops(module: nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one forward of module(x), as torch's FlopCounterMode counts them. (Its backward formula for a
    convolution ignores `groups` in the weight gradient, so a depthwise convolution's backward is counted as a
    full one's: conv_cost counts forwards only.)"""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(x)
    return int(counter.get_total_flops())


def exponent(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log y on log x over every point (Table 1's fit, no fixed-cost cut: a ratio of
    two costs has no fixed cost of its own): y grows as x to this power."""
    return fit_exponent(xs, ys, fixed_mult=1.0)["slope"]


def counted_flops(module: nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one forward and backward of module(x), as torch's FlopCounterMode counts them."""
    x = x.detach().clone().requires_grad_(True)
    with FlopCounterMode(display=False) as counter:
        module(x).backward(torch.ones_like(x))
    module.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def fwd_bwd_seconds(module: nn.Module, x: torch.Tensor, repeats: int, warmup: int) -> float:
    """Seconds of one forward + backward (the fastest of `repeats` timed blocks)."""
    xg = x.detach().clone().requires_grad_(True)
    gy = torch.ones_like(x)

    def step() -> None:
        module.zero_grad(set_to_none=True)
        xg.grad = None
        module(xg).backward(gy)

    return _best_time(step, repeats, warmup, x.device.type == "cuda")


def memory_bytes(module: nn.Module, x: torch.Tensor) -> tuple[int, str]:
    """Memory of one forward + backward and what it is: CUDA's allocator peak above what was allocated before; on
    a CPU (no allocator statistics) the largest tensor any op of the step produced."""
    xg = x.detach().clone().requires_grad_(True)
    if x.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        module(xg).backward(torch.ones_like(x))
        torch.cuda.synchronize()
        module.zero_grad(set_to_none=True)
        return int(torch.cuda.max_memory_allocated() - before), "CUDA allocator peak"
    with _OpRecorder() as rec:
        module(xg).backward(torch.ones_like(x))
    module.zero_grad(set_to_none=True)
    return int(rec.max_bytes), "largest tensor of the step"


def crossing(ns: list[int], ratios: list[float]) -> tuple[float, int]:
    """Where ratio (self-attention / recurrent) passes 1 as n grows, interpolated on log n and log ratio between
    the two points around it: (n*, 0); beyond the grid, (the last n, +1) if attention is cheaper at every n, (the
    first n, -1) if it is dearer at every n (n* lies outside the grid on that side)."""
    if ratios[0] >= 1:
        return float(ns[0]), -1
    for i in range(1, len(ns)):
        if ratios[i] >= 1:
            x0, x1 = math.log(ns[i - 1]), math.log(ns[i])
            y0, y1 = math.log(ratios[i - 1]), math.log(ratios[i])
            return math.exp(x0 + (0 - y0) * (x1 - x0) / (y1 - y0)) if y1 != y0 else float(ns[i]), 0
    return float(ns[-1]), 1


def _deviation(n_star: float, side: int, d: int) -> float:
    """log2(n* / d), the claim's measure; for a crossing outside the grid only where the grid's edge already lies
    more than a factor of 2 from d (the bound then decides), else NaN (the grid cannot tell)."""
    dev = math.log2(n_star / d)
    if side == 0 or abs(dev) > 1:
        return dev
    return float("nan")


def crossover(spec: StatementSpec, device: torch.device, on_point: Point) -> dict:
    """§4: self-attention (no projections: the O(n^2 d) of Table 1) against a recurrent layer (O(n d^2)) at width
    d, n = d x factors swept upward, counted FLOPs and measured time; stops once both have crossed."""
    d, B = spec.d, spec.batch
    ns = sorted({max(2, round(d * f)) for f in spec.factors})
    points = []
    for n in ns:
        torch.manual_seed(0)
        x = torch.randn(B, n, d, device=device)
        att, rec = make_layer("sdpa", d).to(device), make_layer(spec.recurrent, d).to(device)
        # counted on the CPU, attention as matmuls (`plain`: the same arithmetic, which the counter sees)
        att_flops = counted_flops(make_layer("plain", d), x.cpu())
        rec_flops = counted_flops(make_layer(spec.recurrent, d), x.cpu())
        t_att = fwd_bwd_seconds(att, x, spec.repeats, spec.warmup)
        t_rec = fwd_bwd_seconds(rec, x, spec.repeats, spec.warmup)
        point = {"n": n, "d": d, "batch": B, "attention_s": t_att, "recurrent_s": t_rec,
                 "attention_flops": att_flops, "recurrent_flops": rec_flops}
        points.append(point)
        on_point(point)
        if t_att >= t_rec and att_flops >= rec_flops:
            break                    # both crossed: larger n only adds attention's n^2
    done = [p["n"] for p in points]
    n_flops, side_flops = crossing(done, [p["attention_flops"] / p["recurrent_flops"] for p in points])
    n_time, side_time = crossing(done, [p["attention_s"] / p["recurrent_s"] for p in points])
    return {"points": points, "recurrent": spec.recurrent,
            "metrics": {"crossover_flops": _deviation(n_flops, side_flops, d),
                        "crossover_time": _deviation(n_time, side_time, d),
                        "crossover_n_flops": n_flops, "crossover_n_time": n_time,
                        "crossover_side_flops": side_flops, "crossover_side_time": side_time, "d": d}}


def _attention(d_model: int, heads: int, d_k: int, d_v: int, score: str, kernel: str, device) -> nn.Module:
    """The model's own multi-head self-attention layer (model/attention.py), no dropout."""
    from model.attention import MultiHeadAttention
    from model.config import paper_base
    from model.kernels import Kernels
    cfg = dataclasses.replace(paper_base, d_model=d_model, n_heads=heads, d_k=d_k, d_v=d_v, p_drop=0.0,
                              attention_score=score)
    torch.manual_seed(0)
    return MultiHeadAttention(cfg, kernels=Kernels.choose(kernel, device)).to(device)


def multi_head(spec: StatementSpec, device: torch.device, on_point: Point) -> dict:
    """§3.2.2: h heads of d_model / h against one head of d_model, projections included, forward + backward."""
    dm, B, n = spec.d_model, spec.batch, spec.n
    torch.manual_seed(0)
    x = torch.randn(B, n, dm, device=device)
    out = {}
    for h in (spec.heads, 1):
        counted = counted_flops(_attention(dm, h, dm // h, dm // h, "scaled", "explicit", "cpu"), x.cpu())
        seconds = fwd_bwd_seconds(_attention(dm, h, dm // h, dm // h, "scaled", "auto", device), x,
                                  spec.repeats, spec.warmup)
        out[h] = {"heads": h, "d_k": dm // h, "flops": counted, "seconds": seconds}
        on_point({"heads": h, "flops": counted, "seconds": seconds})
    many, one = out[spec.heads], out[1]
    return {"points": list(out.values()),
            "metrics": {"mh_flops_ratio": many["flops"] / one["flops"],
                        "mh_time_ratio": many["seconds"] / one["seconds"],
                        "mh_ms_many": 1e3 * many["seconds"], "mh_ms_one": 1e3 * one["seconds"],
                        "mh_flops_many": many["flops"], "mh_flops_one": one["flops"], "d_model": dm}}


def dot_vs_additive(spec: StatementSpec, device: torch.device, on_point: Point) -> dict:
    """§3.2.1: the model's attention with `score` at each d_k of d_ks (d_v the base's d_model / h, as
    studies/scaling_dk.yaml sets d_k alone), forward + backward: time and memory."""
    dm, B, n = spec.d_model, spec.batch, spec.n
    torch.manual_seed(0)
    x = torch.randn(B, n, dm, device=device)
    points, what = [], ""
    for d_k in spec.d_ks:
        layer = _attention(dm, spec.heads, d_k, dm // spec.heads, spec.score, "auto", device)
        seconds = fwd_bwd_seconds(layer, x, spec.repeats, spec.warmup)
        mem, what = memory_bytes(layer, x)
        point = {"d_k": d_k, "ms": 1e3 * seconds, "mem_bytes": mem}
        points.append(point)
        on_point(point)
    return {"points": points, "memory": what,
            "metrics": {"attn_ms": sum(p["ms"] for p in points), "attn_mem_bytes": max(p["mem_bytes"] for p in points)}}


def position_table(spec: StatementSpec, seed: int) -> torch.Tensor:
    """The positional table in float64: the sinusoid (§3.5), or the model's learned table as initialized."""
    from model.config import paper_base
    from model.layers import PositionalEncoding, sinusoid_table
    rows = spec.positions + spec.max_offset
    if spec.embedding == "sinusoid":
        return sinusoid_table(rows, spec.d, dtype=torch.float64)
    torch.manual_seed(seed)
    cfg = dataclasses.replace(paper_base, d_model=spec.d, positional="learned", max_len=rows)
    return PositionalEncoding(cfg).table.detach().double()


def offset_fit(table: torch.Tensor, positions: int, k: int, split: str = "interleaved") -> float:
    """The held-out relative residual ||X_test M - Y_test|| / ||Y_test|| (Frobenius) of the least-squares M with
    PE_pos M = PE_pos+k, fitted on half the positions: the even ones (`interleaved`), or the first half
    (`halves`, an extrapolation). gelsd (SVD) solves it, so that near-collinear columns (the lowest frequencies
    barely turn over a thousand positions) get the minimum-norm map, not an arbitrary one."""
    X, Y = table[:positions], table[k:positions + k]
    fit, test = (slice(0, None, 2), slice(1, None, 2)) if split == "interleaved" else \
        (slice(0, positions // 2), slice(positions // 2, None))
    M = torch.linalg.lstsq(X[fit], Y[fit], driver="gelsd").solution
    return float((X[test] @ M - Y[test]).norm() / Y[test].norm())


def offset(spec: StatementSpec, seed: int, on_point: Point) -> dict:
    """§3.5: "for any fixed offset k, PE_pos+k can be represented as a linear function of PE_pos", k = 1..max."""
    table = position_table(spec, seed)
    points = []
    for k in range(1, spec.max_offset + 1):
        point = {"k": k, "residual": offset_fit(table, spec.positions, k),
                 "residual_halves": offset_fit(table, spec.positions, k, "halves")}
        points.append(point)
        on_point(point)
    return {"points": points,
            "metrics": {"offset_residual": max(p["residual"] for p in points),
                        "offset_residual_halves": max(p["residual_halves"] for p in points)}}


def conv_cost(spec: StatementSpec, device: torch.device, on_point: Point) -> dict:
    """§4: "Convolutional layers are generally more expensive than recurrent layers, by a factor of k. Separable
    convolutions [...] decrease the complexity considerably, to O(k · n · d + n · d^2)." At width d over n
    positions, for each kernel width k: a convolution (Table 1's, scaling.py's CausalConv), its separable form and
    a recurrent layer, counted forward FLOPs and measured forward + backward time; the exponents in k of conv /
    recurrent (the paper: 1) and of conv / separable (1 where d >> k: the separable form removes the factor k)."""
    d, B, n = spec.d, spec.batch, spec.n
    torch.manual_seed(0)
    x = torch.randn(B, n, d, device=device)
    rec_flops = forward_flops(make_layer(spec.recurrent, d), x.cpu())
    rec_s = fwd_bwd_seconds(make_layer(spec.recurrent, d).to(device), x, spec.repeats, spec.warmup)
    points = []
    for k in spec.ks:
        conv, sep = make_layer("conv", d, k=k), make_layer("conv_separable", d, k=k)
        point = {"k": k, "conv_flops": forward_flops(conv, x.cpu()), "separable_flops": forward_flops(sep, x.cpu()),
                 "recurrent_flops": rec_flops,
                 "conv_s": fwd_bwd_seconds(conv.to(device), x, spec.repeats, spec.warmup),
                 "separable_s": fwd_bwd_seconds(sep.to(device), x, spec.repeats, spec.warmup), "recurrent_s": rec_s}
        points.append(point)
        on_point(point)
    ks = [p["k"] for p in points]
    last = points[-1]
    return {"points": points, "recurrent": spec.recurrent,
            "metrics": {"conv_k_exp_flops": exponent(ks, [p["conv_flops"] / p["recurrent_flops"] for p in points]),
                        "conv_k_exp_time": exponent(ks, [p["conv_s"] / p["recurrent_s"] for p in points]),
                        "sep_gain_exp_flops": exponent(ks, [p["conv_flops"] / p["separable_flops"] for p in points]),
                        "sep_gain_exp_time": exponent(ks, [p["conv_s"] / p["separable_s"] for p in points]),
                        "conv_over_recurrent_flops": last["conv_flops"] / rec_flops,
                        "conv_over_recurrent_time": last["conv_s"] / rec_s,
                        "conv_over_separable_flops": last["conv_flops"] / last["separable_flops"],
                        "conv_over_separable_time": last["conv_s"] / last["separable_s"], "d": d}}


def measure(spec: StatementSpec, seed: int = 0, on_point: Point = lambda p: None) -> dict:
    """One row: its points, its final metrics, the device and the thread count it ran with."""
    device = resolve_device(spec.device)
    with _torch_threads(device.type, spec.threads):
        threads = torch.get_num_threads()
        if spec.measure == "crossover":
            result = crossover(spec, device, on_point)
        elif spec.measure == "multi_head":
            result = multi_head(spec, device, on_point)
        elif spec.measure == "dot_vs_additive":
            result = dot_vs_additive(spec, device, on_point)
        elif spec.measure == "conv_cost":
            result = conv_cost(spec, device, on_point)
        else:
            result = offset(spec, seed, on_point)
    return {**result, "measure": spec.measure, "device": str(device), "threads": threads}
