"""FLOPs probe: three independent counts agree, the SDPA handle matters, the paper's step is ~9.5e12."""

import json

import pytest

from harness.errors import UserError
from harness.probes import flops
from model import TransformerConfig
from model.config import paper_base

# `import fvcore.nn` warns through torch.jit; fvcore's tracer warns about data-dependent branches.
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

SMALL = TransformerConfig(vocab_size=500, d_model=64, d_ff=256, n_heads=4, n_layers=2)
B, S, T = 4, 12, 12


@pytest.fixture(scope="module")
def small():
    return flops.compare(SMALL, B, S, T)


def test_three_methods_agree_on_small_config(small):
    assert small["agree"] and small["why"] is None
    assert small["max_deviation"] <= 0.02
    for method in ("fvcore", "torch"):
        assert small[method]["step_flops"] == pytest.approx(small["analytic"]["step_flops"], rel=0.02)
    # Per target token is the step over B*T target tokens.
    ana = small["analytic"]
    assert ana["flops_per_target_token"] == ana["step_flops"] / (B * T)


def test_conventions_hold(small):
    # torch counts two per MAC with backward included: its backward is twice its forward (every matmul has
    # an activation-gradient and a weight-gradient matmul), and its forward is 2 x the analytic MACs.
    tc, ana, fv = small["torch"], small["analytic"], small["fvcore"]
    assert tc["backward_flops"] == 2 * tc["forward_flops"]
    assert tc["forward_flops"] == 2 * ana["forward_macs"]
    # fvcore's MACs are forward-only, one per multiply-add; step = x 6.
    assert fv["step_flops"] == 6 * fv["forward_macs"]
    # Nothing that multiplies against a weight is left unhandled; layer_norm is fvcore's rough estimate,
    # reported apart and kept out of the MAC count.
    assert fv["significant_unsupported"] == []
    assert fv["norm_flops"] > 0 and fv["forward_macs"] == fv["by_operator"]["linear"] + fv["sdpa_macs"]


def test_sdpa_handle_matters(small):
    without = flops.count_fvcore(SMALL, B, S, T, sdpa_handle=False)
    assert "aten::scaled_dot_product_attention" in without["unsupported"]
    attention = small["analytic"]["attention_macs"]
    assert attention > 0
    assert small["fvcore"]["forward_macs"] - without["forward_macs"] == attention
    assert small["fvcore"]["sdpa_macs"] == attention


def test_sdpa_handle_counts_full_causal_square():
    # Decoder self-attention is causal yet counted T x T: the kernels compute (and both counters see) it all.
    terms = flops.analytic_terms(SMALL, B, S, T)
    assert terms["dec_self_attn"] == SMALL.n_dec_layers * B * SMALL.n_heads * T * T * (SMALL.d_k + SMALL.d_v)


@pytest.mark.parametrize("overrides", [
    {"d_k": 24, "d_v": 8},
    {"n_kv_heads": 2},
    {"ffn": "swiglu"},
    {"positional": "rope", "norm": "rms", "norm_position": "pre", "ffn": "swiglu", "n_kv_heads": 1,
     "n_enc_layers": 1, "n_dec_layers": 3},
], ids=["dk_ne_dv", "gqa2", "swiglu", "modern_mix"])
def test_variants_analytic_matches_torch(overrides):
    cfg = SMALL.replace(**overrides)
    ana = flops.count_analytic(cfg, 3, 10, 7)            # S != T, so cross-attention terms are checked too
    tc = flops.count_torch(cfg, 3, 10, 7)
    assert tc["step_flops"] == pytest.approx(ana["step_flops"], rel=0.02)


def test_variants_change_the_count_as_derived():
    base = flops.analytic_terms(SMALL, B, S, T)
    swiglu = flops.analytic_terms(SMALL.replace(ffn="swiglu"), B, S, T)
    assert swiglu["enc_ffn"] == base["enc_ffn"] * 3 // 2
    gqa = flops.analytic_terms(SMALL.replace(n_kv_heads=2), B, S, T)
    assert gqa["enc_self_proj"] < base["enc_self_proj"]
    assert gqa["enc_self_attn"] == base["enc_self_attn"]     # every query head still scores every key


def test_count_batch_scaling_is_exact():
    full = flops.count_torch(SMALL, 6, S, T)
    scaled = flops.count_torch(SMALL, 6, S, T, count_batch=2)
    assert scaled["counted_batch"] == 2 and scaled["step_flops"] == full["step_flops"]


def test_paper_step_near_reference():
    res = flops.paper_step()
    assert paper_base.vocab_size == 37000
    assert abs(res["deviation"]) <= 0.02
    assert res["step_flops"] == pytest.approx(9.5e12, rel=0.02)
    assert res["flops_per_target_token"] == pytest.approx(res["step_flops"] / 25000)


def test_paper_base_counters_match_analytic_scaled():
    # Two sentences of paper_base through both counters, scaled to B=1000: exact, since all terms are linear in B.
    ana = flops.count_analytic(paper_base, 1000, 25, 25)
    for count in (flops.count_fvcore, flops.count_torch):
        res = count(paper_base, 1000, 25, 25, count_batch=2)
        assert res["step_flops"] == pytest.approx(ana["step_flops"], rel=0.02)


def test_main_table_and_json(capsys):
    assert flops.main("cpu_d128", 200, 20, False) == 0
    out = capsys.readouterr().out
    for word in ("analytic", "fvcore", "torch", "one per multiply-add", "two per multiply-add", "scaled"):
        assert word in out
    assert flops.main("cpu_d128", 200, 20, True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["agree"] and data["B"] == 10 and data["preset"] == "cpu_d128"


def test_main_rejects_unknown_preset():
    with pytest.raises(UserError, match="paper_base"):
        flops.main("paper_bse", 25000, 25, False)


def test_compare_names_the_missing_term(monkeypatch):
    # Out-of-the-box fvcore (no SDPA handle) must make compare disagree and say why.
    original = flops.count_fvcore
    monkeypatch.setattr(flops, "count_fvcore", lambda *a, **k: original(*a, **k, sdpa_handle=False))
    res = flops.compare(SMALL, B, S, T)
    assert not res["agree"] and res["ratios"]["fvcore"] < 0.98
    assert "scaled_dot_product_attention" in res["why"] and "attention MACs" in res["why"]


@pytest.mark.parametrize("changes", [{}, {"share_embeddings": False}, {"attention": "luong"},
                                     {"n_enc_layers": 2, "n_dec_layers": 1}, {"n_enc_layers": 5, "d_model": 24}])
def test_the_recurrent_rivals_parameters_match_the_formula(changes):
    from harness.probes.flops import rnn_parameters
    from model import build_model, count_parameters
    from model.rnn import RNNConfig
    cfg = RNNConfig(vocab_size=50, d_model=16, n_enc_layers=3, n_dec_layers=4, max_len=64).replace(**changes)
    assert count_parameters(build_model(cfg)) == rnn_parameters(cfg)


@pytest.mark.parametrize("changes", [{}, {"kernel": 5}, {"d_model": 24, "d_hidden": 40}, {"n_enc_layers": 1,
                                                                                       "n_dec_layers": 4}])
def test_the_convolutional_rivals_parameters_match_the_formula(changes):
    from harness.probes.flops import conv_parameters
    from model import build_model, count_parameters
    from model.conv import ConvConfig
    cfg = ConvConfig(vocab_size=50, d_model=16, d_hidden=32, n_enc_layers=3, n_dec_layers=2,
                     max_len=64).replace(**changes)
    assert count_parameters(build_model(cfg)) == conv_parameters(cfg)


def test_the_table2_rivals_are_within_ten_percent_of_the_base_they_stand_against():
    """Every profile's rival rows hold the base row's parameter count within 10 % (the formula's count)."""
    from pathlib import Path

    from harness.probes.flops import conv_parameters, rnn_parameters
    from harness.study.estimate import parameter_count
    from harness.study.kinds import load_study

    for profile in ("tiny", "multi30k", "paper"):
        trials = {
            t.row: t
            for t in load_study(Path(__file__).parents[1] / "studies" / "table2.yaml", profile).trials
            if t.seed == 0
        }
        base = parameter_count(trials["base"])
        for row, formula in (("gnmt", rnn_parameters), ("convs2s", conv_parameters)):
            if row in trials:
                n = formula(trials[row].model)
                assert n == parameter_count(trials[row])
                if profile != "paper":  # the paper's rivals are their own papers' sizes
                    assert abs(n / base - 1) <= 0.10, (profile, row, n, base)
