"""§3.2.1's measurements (harness/eval/attention_stats.py): what they read off a model, checked where the answer
is known, and taken during training without changing it."""

import json

import pytest
import torch

from harness.cli import main
from harness.eval.attention_stats import METRICS, attention_statistics
from model import Transformer, TransformerConfig
from tests.helpers import train_small


def _batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 60, (5, 9), generator=g)
    src[2, 6:] = 0
    tgt = torch.randint(4, 60, (5, 8), generator=g)
    tgt[4, 5:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def _model(score="scaled", d_k=8):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=60, d_model=32, n_heads=4, d_k=d_k, d_v=8, d_ff=64, n_layers=2,
                                         attention_score=score))


def test_the_logits_are_the_dot_products_scaled_as_the_score_says():
    for score, d_k in (("scaled", 8), ("scaled", 32), ("unscaled", 32)):
        stats = attention_statistics(_model(score, d_k), *_batch())
        assert set(stats) == set(METRICS)
        factor = 1 / d_k if score == "scaled" else 1.0
        assert stats["attn_logit_var"] == pytest.approx(stats["attn_qk_var"] * factor, rel=1e-6)
        assert 0 < stats["attn_max_prob"] <= 1 and 0 < stats["attn_entropy_ratio"] <= 1


def test_zero_queries_and_keys_give_uniform_attention():
    """With W^Q and W^K zero every logit is 0: every query spreads evenly over the keys it may see (its
    sentence's real source tokens, or the target up to itself), so the entropy is ln(keys) exactly."""
    model = _model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("qkv_proj.weight", "qkv_proj.bias")):
                p[:64].zero_()                                         # the Q and K rows (4 heads x d_k 8 each)
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                p.zero_()
    stats = attention_statistics(model, *_batch())
    assert stats["attn_logit_var"] == 0 and stats["attn_qk_var"] == 0
    assert stats["attn_entropy_ratio"] == pytest.approx(1.0, abs=1e-6)         # float32 softmax


def test_the_gradient_norm_is_that_of_every_query_and_key_projection():
    model = _model()
    src, tgt_in, tgt_out = _batch()
    stats = attention_statistics(model, src, tgt_in, tgt_out, label_smoothing=0.1)
    assert all(p.grad is None for p in model.parameters())            # left zeroed
    loss, _, n = model.loss(src, tgt_in, tgt_out, 0.1)
    params = {name: p for name, p in model.named_parameters()}
    grads = torch.autograd.grad(loss / n, list(params.values()))
    by_name = dict(zip(params, grads))
    total = 0.0
    for name, g in by_name.items():
        if "qkv_proj" in name:
            total += float((g[:64] ** 2).sum())                        # Q and K rows of the fused projection
        elif "q_proj" in name:
            total += float((g ** 2).sum())
        elif "kv_proj" in name:
            total += float((g[:32] ** 2).sum())                        # the K rows (4 key heads x d_k 8)
    assert stats["attn_qk_grad_norm"] == pytest.approx(total ** 0.5, rel=1e-5)


def test_other_families_are_not_measured():
    from model import build_model
    from model.decoder_only import DecoderOnlyConfig
    m = build_model(DecoderOnlyConfig(vocab_size=60, d_model=16, d_ff=32, n_heads=4, n_layers=2))
    assert attention_statistics(m, *_batch()) == {}


@pytest.mark.slow
def test_the_trainer_measures_at_initialisation_and_every_evaluation_without_changing_training(capsys, tmp_path):
    sets = ("d_model=32", "d_ff=64", "n_heads=4", "n_layers=2", "warmup=40", "attention_score=unscaled")
    plain, _ = train_small(main, capsys, tmp_path / "a", "transformer", *sets, steps=60)
    measured, _ = train_small(main, capsys, tmp_path / "b", "transformer", *sets, "attention_stats_sentences=8",
                              steps=60)
    assert measured["dev_ppl_curve"] == plain["dev_ppl_curve"] and measured["dev_ppl"] == plain["dev_ppl"]
    assert set(METRICS) <= set(measured) and not set(METRICS) & set(plain)
    rows = [json.loads(line) for line in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    measured_at = [r["step"] for r in rows if "attn_qk_var" in r]
    assert measured_at == [0, 20, 40]                                   # the initialisation, then each evaluation


def test_the_report_tables_each_rows_attention_at_initialisation_and_at_the_end(tmp_path, monkeypatch):
    import pandas as pd

    from harness.report import attention_stats as section
    runs, histories = [], {}
    for row, score, d_k, prob in (("base", "scaled", "8", 0.3), ("unscaled_dk1024", "unscaled", "128", 0.9)):
        for seed in range(3):
            run_id = f"{row}-{seed}"
            rec = {"tags.row": row, "status": "FINISHED", "run_id": run_id, "params.model.attention_score": score,
                   "params.model.d_k": d_k}
            for key, _, _ in section.SHOWN:
                rec[f"metrics.{key}"] = prob + 0.01 * seed              # the end: the run's last value
                histories[(run_id, key)] = [(0, prob / 2 + 0.01 * seed), (200, prob)]
            runs.append(rec)
    monkeypatch.setattr(section.logged, "metric_history", lambda uri, run_id, key: histories[(run_id, key)])
    lines, plots = section.attention_stats_section(pd.DataFrame(runs), ["base", "unscaled_dk1024"], "uri",
                                                   tmp_path / "s.png")
    text = "\n".join(lines)
    assert [p.name for p in plots] == ["s.png"] and plots[0].exists() and "![s](s.png)" in text
    # unscaled_dk1024: at initialisation 0.45 + 0.01 s over seeds 0-2 (mean 0.46, half-interval 2.48 x 0.01), at
    # the end 0.91.
    assert "| **unscaled_dk1024** | unscaled | 128 | 0.46 ± 0.0248 | 0.460 ± 0.025 |" in text
    assert "| 0.910 ± 0.025 |" in text
    assert section.attention_stats_section(pd.DataFrame([{"tags.row": "base", "status": "FINISHED"}]), ["base"],
                                           "uri", tmp_path / "t.png") == ([], [])
