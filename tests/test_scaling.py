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
