import math

import pytest
import torch

from harness.probes import scaling as sc


@pytest.mark.parametrize("kind", sc.PATH_KINDS)
def test_path_length_matches_formula(kind):
    for n in (9, 10, 13, 16, 17):
        got = sc.path_length(kind, n, k=3, r=4)
        assert got["measured"] == got["formula"] == sc.path_formula(kind, n, k=3, r=4), (kind, got)


def test_path_formulas_are_the_papers_shapes():
    # n=17, k=3, r=4: conv ceil(16/2)=8, dilated 3^3=27>=17 -> 3, restricted ceil(16/2)=8, rnn 16
    assert [sc.path_formula(k_, 17) for k_ in ("sdpa", "rnn_loop", "conv", "conv_dilated", "restricted")] \
        == [1, 16, 8, 3, 8]
    assert sc.path_formula("conv_dilated", 9) == 2 and sc.path_formula("conv_dilated", 10) == 3


def test_sequential_ops_rnn_n_attention_one():
    for n in (7, 20):
        rnn = sc.sequential_ops("rnn_loop", n)
        assert rnn["by_construction"] == n and rnn["measured"] == n and rnn["module_counter"] == n
        assert rnn["aten_ops_per_position"] > 0
    for kind in ("sdpa", "plain", "restricted", "conv", "conv_separable"):
        s = sc.sequential_ops(kind, 20)
        assert s["aten_ops_per_position"] == 0 and s["measured"] == 1 == s["by_construction"], kind


def test_fit_recovers_slope_past_fixed_cost():
    ns = [8, 16, 32, 64, 128, 256, 512, 1024]
    ts = [1e-3 + 1e-7 * n ** 2 for n in ns]          # fixed cost dominates the small n
    fit = sc.fit_exponent(ns, ts, fixed_mult=3.0)
    assert abs(fit["slope"] - 2) < 0.1
    assert fit["dropped"] >= 4 and min(fit["x_used"]) >= 128
    naive = sc.fit_exponent(ns, ts, fixed_mult=0.0)  # keep every point: the fixed cost biases it
    assert naive["slope"] < 1.5


def test_fit_flags_flat_data():
    fit = sc.fit_exponent([1, 2, 4, 8], [1.0, 1.01, 0.99, 1.0])
    assert fit["fixed_cost_dominated"] and abs(fit["slope"]) < 0.05


def test_restricted_equals_masked_plain_attention():
    x = torch.randn(2, 11, 6, dtype=torch.float64)
    for r in (2, 4, 6):
        ref = sc.PlainAttention(6, window=r // 2)(x)
        torch.testing.assert_close(sc.RestrictedAttention(6, r)(x), ref)
    # and the window matters: unrestricted attention differs
    assert not torch.allclose(sc.RestrictedAttention(6, 4)(x), sc.PlainAttention(6)(x))


def test_sdpa_equals_plain_attention():
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(sc.SDPAAttention(8, heads=2)(x), sc.PlainAttention(8, heads=2)(x))


def test_quick_run_scaling_tiny_grid(tmp_path):
    threads = torch.get_num_threads()
    res = sc.run_scaling(ns=(8, 16, 32), ds=(4, 8, 16), n_fixed=16, d_fixed=8, batch=1, repeats=1,
                         warmup=0, device="cpu", path_ns=(9,), r=4)
    assert set(res["fits"]) == set(sc.TIMED)
    assert {r_["layer"] for r_ in res["rows"]} == set(sc.TIMED)
    for r_ in res["rows"]:
        assert math.isfinite(r_["fwd_s"]) and r_["fwd_s"] > 0 and r_["fwd_bwd_s"] > 0
        assert r_["peak_mem_bytes"] is None and r_["largest_fwd_tensor_bytes"] > 0
    for f in res["fits"].values():
        assert all(math.isfinite(v["slope"]) for v in f.values())
    rows = sc.table1_rows(res)
    assert {t["layer"] for t in rows} == set(sc.TIMED) | {"conv_dilated"}
    att = next(t for t in rows if t["layer"] == "sdpa")
    assert att["paper_exp_n"] == 2 and att["path_measured"] == 1 and att["seq_ops_measured"] == 1
    rnn = next(t for t in rows if t["layer"] == "rnn_loop")
    assert rnn["seq_ops_measured"] == 32 and rnn["path_measured"] == 8
    assert isinstance(res["notes"], list) and all(isinstance(s, str) for s in res["notes"])
    assert res["config"]["torch_threads"] == 1 and torch.get_num_threads() == threads  # restored
    sc.plot(res, tmp_path / "t1.png")
    assert (tmp_path / "t1.png").stat().st_size > 1000


def _visible(layer, n: int, d: int) -> torch.Tensor:
    """(n, n) True where output i depends on input j (a gradient check, float64)."""
    x = torch.randn(1, n, d, dtype=torch.float64, requires_grad=True)
    y = layer.double()(x)
    return torch.stack([torch.autograd.grad(y[0, i].sum(), x, retain_graph=True)[0][0].abs().sum(-1) > 0
                        for i in range(n)])


def test_model_window_layer_sees_what_restricted_attention_sees():
    # The model's own layer with attention_window = r/2 on either side: output i depends on exactly the inputs
    # restricted attention with neighbourhood r lets it see, and full attention's layer on all of them.
    # n = 13 takes the CPU's explicit kernel, n past CPU_EXPLICIT_MAX_KEYS the masked SDPA path that is timed.
    from model.kernels import CPU_EXPLICIT_MAX_KEYS
    d = 8
    for n, r in ((13, 2), (13, 4), (13, 6), (CPU_EXPLICIT_MAX_KEYS + 5, 6)):
        i = torch.arange(n)
        want = (i[:, None] - i[None, :]).abs() <= r // 2
        assert torch.equal(_visible(sc.make_layer("window_model", d, r=r), n, d), want), (n, r)
        assert torch.equal(_visible(sc.make_layer("restricted", d, r=r), n, d), want), (n, r)
    # the causal window that decode_window's path stands on: r keys back and itself
    n, r = 13, 4
    i = torch.arange(n)
    want = ((i[:, None] - i[None, :]) >= 0) & ((i[:, None] - i[None, :]) <= r)
    assert torch.equal(_visible(sc.make_layer("window_causal", d, r=r), n, d), want)


@pytest.mark.parametrize("kind", ["decode_full", "decode_window"])
def test_model_decoding_step_attends_to_its_cache(kind):
    # One cached step at position n: softmax(q K^T / sqrt(d)) V over the keys the cache holds after the step
    # wrote its own (all n + 1 with the full cache; the ring's r + 1 with the window), through W^O.
    d, r = 8, 4
    layer = sc.make_layer(kind, d, r=r).double()
    for n in (3, 9, 30):
        x = torch.randn(2, n, d, dtype=torch.float64)
        out = layer(x)
        cache, attn = layer._cache[1], layer.attn
        slots = (n + 1) if kind == "decode_full" else min(n + 1, r + 1)
        assert cache.k.size(2) == slots
        q = attn.qkv_proj(x[:, -1:])[..., :d].view(2, 1, 1, d)
        k, v = cache.k[:, :, :slots], cache.v[:, :, :slots]
        ref = ((q @ k.transpose(-1, -2)) / math.sqrt(d)).softmax(-1) @ v
        torch.testing.assert_close(out, attn.out_proj(ref.reshape(2, 1, d)))
        # the step's own key went to its slot: position n at slot n (full) or n mod (r + 1) (the ring)
        k_new = attn.qkv_proj(x[:, -1:])[..., d:2 * d].view(2, 1, 1, d)
        torch.testing.assert_close(cache.k[:, :, n % slots:n % slots + 1], k_new)
        if kind == "decode_window" and n >= slots:     # the ring holds positions n - r .. n, each once
            assert sorted(cache.positions.tolist()) == list(range(n - r, n + 1))
        assert torch.equal(layer(x), out)             # a second call rewrites the same slot: the same step


def test_model_kinds_through_the_study_driver():
    # The trial's driver on the model's layers: a decoding step is timed forward only (no fwd + backward fit),
    # its sequential ops are 1, and its path length is its stand-in's.
    from harness.probes.scaling_spec import MODEL_KINDS, ScalingSpec
    for kind in MODEL_KINDS:
        spec = ScalingSpec(layer=kind, ns=(8, 16, 32), ds=(8, 16, 32), n_fixed=16, d_fixed=8, batch=1, repeats=1,
                           warmup=0, passes=1, r=4, path_ns=(5, 6, 7))
        res = sc.measure_layer(spec)
        decode = kind in sc.DECODE_KINDS
        assert set(res["fits"]) == ({"n_fwd", "d_fwd"} if decode else {"n_fwd", "n_fwd_bwd", "d_fwd", "d_fwd_bwd"})
        assert all((r_["fwd_bwd_s"] is None) == decode and r_["fwd_s"] > 0 for r_ in res["rows"])
        assert res["sequential_ops"]["measured"] == 1
        assert all(p["measured"] == p["formula"] for p in res["path_lengths"]), kind
        assert res["paper"]["exp_n"] == {"window_model": 1, "decode_full": 1, "decode_window": 0}[kind]
