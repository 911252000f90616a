"""Each check of the implementation (harness/paper/checks.yaml) fails on a broken implementation and passes on this
one: the check is judged by its own kind, on what the study's own measurement gives, at a small size. A check that
no broken implementation could fail would be a check that cannot fail."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import model
from harness.probes import inference, statements
from harness.probes.inference_spec import InferenceSpec
from harness.probes.statement_spec import StatementSpec
from harness.report.claim_kinds.registry import kind_of
from harness.report.verdicts import load_checks

CPU = torch.device("cpu")


def judged(check_id: str, measured: dict[str, float], rows: list[str] | None = None) -> str:
    """The check's result on one seed of measured metrics, read for each of its rows (or for `rows` alone)."""
    check = {c.id: c for c in load_checks()}[check_id]
    if rows is not None:
        check = dataclasses.replace(check, a=rows if len(rows) > 1 else rows[0])
    names = [check.a] if isinstance(check.a, str) else list(check.a)
    values = lambda metric: {r: {0: measured[metric]} for r in names} if metric in measured else {}  # noqa: E731
    return kind_of(check.expect).judge(check, values, lambda row: {})["verdict"]


def test_every_check_has_a_test_here():
    tested = {"multi_head_costs_as_single_head", "sinusoid_offset_is_linear", "conv_costs_k_times_recurrent",
              "separable_conv_removes_k", "gqa_shrinks_kv_cache"}
    assert {c.id for c in load_checks()} == tested


def test_multi_head_cost_fails_where_each_head_keeps_the_full_width(monkeypatch):
    spec = StatementSpec(measure="multi_head", d_model=64, heads=8, n=16, batch=2, repeats=1, warmup=0)
    got = statements.multi_head(spec, CPU, lambda p: None)["metrics"]
    assert judged("multi_head_costs_as_single_head", got) == "passes"
    real = statements._attention
    # broken: h heads, each of d_k = d_v = d_model instead of d_model / h
    monkeypatch.setattr(statements, "_attention", lambda dm, h, dk, dv, *a: real(dm, h, dm, dm, *a))
    broken = statements.multi_head(spec, CPU, lambda p: None)["metrics"]
    assert broken["mh_flops_ratio"] > 4
    assert judged("multi_head_costs_as_single_head", broken) == "fails"


def test_the_offset_identity_fails_on_a_table_that_is_not_a_sinusoid(monkeypatch):
    spec = StatementSpec(measure="offset", embedding="sinusoid", d=64, positions=128, max_offset=5)
    got = statements.offset(spec, 0, lambda p: None)["metrics"]
    assert judged("sinusoid_offset_is_linear", got) == "passes"
    import model.layers
    real = model.layers.sinusoid_table
    # broken: every entry cubed (sin^3 x holds sin 3x, which no linear map of the table's own columns gives)
    monkeypatch.setattr(model.layers, "sinusoid_table", lambda n, d, dtype=torch.float32: real(n, d, dtype) ** 3)
    broken = statements.offset(spec, 0, lambda p: None)["metrics"]
    assert broken["offset_residual"] > 1e-3
    assert judged("sinusoid_offset_is_linear", broken) == "fails"


@pytest.fixture
def conv_spec():
    return StatementSpec(measure="conv_cost", d=64, n=16, batch=1, ks=(3, 5, 9), repeats=1, warmup=0)


def test_the_convolution_checks_pass_on_the_code(conv_spec):
    got = statements.conv_cost(conv_spec, CPU, lambda p: None)["metrics"]
    assert judged("conv_costs_k_times_recurrent", got) == "passes"
    assert judged("separable_conv_removes_k", got) == "passes"


def test_conv_cost_fails_on_a_convolution_that_ignores_its_kernel_width(monkeypatch, conv_spec):
    real = statements.make_layer
    # broken: the convolution built at width 1 whatever k it is given (its cost then never grows with k)
    monkeypatch.setattr(statements, "make_layer",
                        lambda kind, d, k=3, **kw: real(kind, d, k=1 if kind == "conv" else k, **kw))
    broken = statements.conv_cost(conv_spec, CPU, lambda p: None)["metrics"]
    assert abs(broken["conv_k_exp_flops"]) < 0.1
    assert judged("conv_costs_k_times_recurrent", broken) == "fails"


def test_the_separable_check_fails_where_the_separable_form_is_the_full_convolution(monkeypatch, conv_spec):
    real = statements.make_layer
    # broken: "separable" builds the full k x d x d convolution, so nothing of the factor k is removed
    monkeypatch.setattr(statements, "make_layer",
                        lambda kind, d, **kw: real("conv" if kind == "conv_separable" else kind, d, **kw))
    broken = statements.conv_cost(conv_spec, CPU, lambda p: None)["metrics"]
    assert abs(broken["sep_gain_exp_flops"]) < 0.1
    assert judged("separable_conv_removes_k", broken) == "fails"


def test_the_gqa_cache_check_fails_on_a_cache_that_keeps_every_head(monkeypatch):
    spec = InferenceSpec(preset="paper_base", model=(("n_kv_heads", 2),), width=0.125, depth=0.2, vocab_size=64,
                         batches=(1,), src_lens=(8,), new_tokens=2, repeats=1, warmup=0, threads=1, device="cpu")
    got = inference.summary_metrics(inference.measure(spec))
    assert got["kv_heads_fraction"] == 0.25
    assert judged("gqa_shrinks_kv_cache", got, ["encdec_gqa"]) == "passes"
    real = model.build_model
    # broken: the model is built, and its cache allocated, with a key/value head for every query head
    monkeypatch.setattr(model, "build_model", lambda cfg: real(model.with_settings(cfg, n_kv_heads=cfg.n_heads)))
    broken = inference.summary_metrics(inference.measure(spec))
    assert broken["kv_fraction_of_mha"] == 1.0 and broken["kv_heads_fraction"] == 0.25
    assert judged("gqa_shrinks_kv_cache", broken, ["encdec_gqa"]) == "fails"
