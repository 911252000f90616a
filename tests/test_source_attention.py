"""How much each target position reads the source (harness/eval/source_attention.py): the probabilities it
recomputes are the ones the layers used, uniform attention gives the counted share, and the metrics cover both
shapes."""

import pytest
import torch

from harness.data.batching import ParallelData
from harness.eval.source_attention import (
    _output,
    _Recorder,
    attention_probabilities,
    source_attention_metrics,
    source_shares,
)
from model import build_model
from model.decoder_only import DecoderOnlyConfig
from tests.helpers import rival_batch, small


def _decoder_only(**changes):
    torch.manual_seed(0)
    settings = dict(vocab_size=50, d_model=16, d_ff=32, n_heads=4, n_layers=2, p_drop=0.0, max_len=64)
    return build_model(DecoderOnlyConfig(**{**settings, **changes})).eval()


def _encoder_decoder():
    torch.manual_seed(0)
    return build_model(small(vocab_size=50)).eval()


@pytest.mark.parametrize("model", ["prefix", "causal", "rope", "gqa", "encdec"])
def test_the_recomputed_probabilities_give_each_layers_own_output(model):
    m = {"prefix": lambda: _decoder_only(), "causal": lambda: _decoder_only(lm="causal"),
         "rope": lambda: _decoder_only(positional="rope"), "gqa": lambda: _decoder_only(n_kv_heads=2),
         "encdec": _encoder_decoder}[model]()
    src, tgt = rival_batch()
    layers = [mod for mod in m.modules() if type(mod).__name__ == "MultiHeadAttention"]
    rec = _Recorder(layers)
    with torch.no_grad():
        m.hidden(src, tgt)
    rec.close()
    assert len(rec.calls) >= 2
    for attn, x, kw, output in rec.calls:
        probs, v = attention_probabilities(attn, x, kw.get("memory"), kw.get("mask"), kw.get("causal", False),
                                           kw.get("offset", 0), kw.get("positions"))
        assert torch.allclose(_output(attn, probs, v) + attn.out_proj.bias, output, atol=1e-5)
        assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)


def test_uniform_attention_puts_the_counted_share_on_the_source():
    """With the query projections zeroed every score is 0: a target token at position t (from 0) of a sentence
    with n source tokens spreads its attention evenly over n + t + 1 keys, n of them the source's."""
    m = _decoder_only()
    with torch.no_grad():
        for block in m.layers:
            q_rows = block.self_attn.sublayer.splits[0]
            block.self_attn.sublayer.qkv_proj.weight[:q_rows] = 0
            block.self_attn.sublayer.qkv_proj.bias[:q_rows] = 0
    src, tgt = rival_batch()
    shares = source_shares(m, src, tgt, tgt, 0)
    n = (src != 0).sum(1, keepdim=True).float()
    t = torch.arange(tgt.size(1)).float()
    assert torch.allclose(shares["mass"], n / (n + t + 1), atol=1e-6)
    assert torch.allclose(shares["uniform"], n / (n + t + 1), atol=1e-6)
    assert ((shares["contribution"] > 0) & (shares["contribution"] < 1)).all()


def test_the_metrics_by_position_for_both_shapes_and_none_for_a_rival():
    from model.rnn import RNNConfig
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(4, 50, (int(n),), generator=g).tolist() for n in torch.randint(2, 8, (30,), generator=g)]
    tgt = [torch.randint(4, 50, (int(n),), generator=g).tolist() for n in torch.randint(2, 8, (30,), generator=g)]
    data = ParallelData(src, tgt)
    out = source_attention_metrics(_decoder_only(), data, 30, torch.device("cpu"), 400, min_tokens=5)
    assert {"src_mass_p1", "src_contrib_p1"} <= set(out) and all(0 < v < 1 for v in out.values())
    # Per layer too, and the stack's figure is the mean of its layers' (same tokens at every layer).
    layers = _decoder_only().cfg.n_layers
    assert {f"src_mass_L{layer}_p1" for layer in range(1, layers + 1)} <= set(out)
    assert not any(k.startswith(f"src_mass_L{layers + 1}_") for k in out)
    assert out["src_mass_p2"] == pytest.approx(sum(out[f"src_mass_L{i}_p2"] for i in range(1, layers + 1)) / layers)
    assert not any(k.startswith("src_mass") for k in
                   source_attention_metrics(_encoder_decoder(), data, 30, torch.device("cpu"), 400, min_tokens=5))
    assert "src_contrib_p1" in source_attention_metrics(_encoder_decoder(), data, 30, torch.device("cpu"), 400, 5)
    rnn = build_model(RNNConfig(vocab_size=50, d_model=8, n_enc_layers=2, n_dec_layers=2))
    assert source_attention_metrics(rnn, data, 30, torch.device("cpu"), 400) == {}


def test_the_report_section_tables_each_rows_shares_by_position_and_the_fade(tmp_path):
    import pandas as pd

    from harness.report.source_attention import source_attention_section
    rows = []
    for row, mass in (("base", None), ("prefix", lambda p, s: 0.6 - 0.03 * p + 0.01 * s)):
        for seed in range(3):
            rec = {"tags.row": row, "status": "FINISHED"}
            for p in range(1, 11):
                rec[f"metrics.src_contrib_p{p}"] = 0.5
                if mass:
                    rec[f"metrics.src_mass_p{p}"] = mass(p, seed)
                    rec[f"metrics.src_uniform_p{p}"] = 0.5 - 0.02 * p
            rows.append(rec)
    lines, plots = source_attention_section(pd.DataFrame(rows), ["base", "prefix"], tmp_path / "s.png")
    text = "\n".join(lines)
    assert [p.name for p in plots] == ["s.png"] and plots[0].exists() and "![s](s.png)" in text
    # prefix: positions 1-3 average 0.54 + 0.01 s, positions 8-10 0.33 + 0.01 s: a fade of +21.0 points each seed
    assert "| **prefix** | 3 | 58.0 [55.5, 60.5] |" in text and "+21.0 [+21.0, +21.0] |" in text
    # uniform: positions 1-3 average 0.46, 8-10 0.32, a fade of 14 points; beyond it the model's is 7
    assert "| uniform attention | 3 | 48.0 [48.0, 48.0] |" in text and "| +14.0 [+14.0, +14.0] | 0 |" in text
    assert "+21.0 [+21.0, +21.0] | +7.0 [+7.0, +7.0] |" in text
    assert text.count("| **base** |") == 1                           # no mass for the encoder-decoder
    assert source_attention_section(pd.DataFrame([{"tags.row": "base", "status": "FINISHED"}]), ["base"],
                                    tmp_path / "t.png") == ([], [])


def test_the_report_gives_each_layers_share_and_fade_with_a_plot(tmp_path):
    import pandas as pd

    from harness.report.source_attention import source_attention_section
    rows = []
    for seed in range(2):
        for row, kind, layers in (("base", "contrib", 2), ("prefix", "mass", 3)):
            rec = {"tags.row": row, "status": "FINISHED"}
            for p in range(1, 11):
                rec[f"metrics.src_{kind}_p{p}"] = 0.5
                for layer in range(1, layers + 1):      # layer l fades by l points a position
                    rec[f"metrics.src_{kind}_L{layer}_p{p}"] = 0.8 - 0.01 * layer * p + 0.01 * seed
            rows.append(rec)
    lines, plots = source_attention_section(pd.DataFrame(rows), ["base", "prefix"], tmp_path / "s.png")
    text = "\n".join(lines)
    assert [p.name for p in plots] == ["s.png", "s_by_layer.png"] and all(p.exists() for p in plots)
    # prefix layer 3: positions 1-3 average 0.74 (+0.01 per seed), 8-10 0.53: a fade of 3 x 7 = 21 points
    assert "|  | mass | 3 | 74.5 [68.1, 80.9] | 53.5 [47.1, 59.9] | +21.0 [+21.0, +21.0] |" in text
    assert "| **base** | contribution | 1 | 78.5 [72.1, 84.9] |" in text
    assert "| **prefix** | mass | 1 |" in text and "|  | mass | 4 |" not in text


def test_the_fade_claim_reads_each_runs_contribution_fade():
    import pandas as pd

    from harness.report.verdicts import check_claims, per_seed
    rows = []
    for seed in range(3):
        for row, slope in (("base", 0.0), ("prefix", 0.02 + 0.001 * seed)):
            rec = {"tags.row": row, "tags.seed": seed, "status": "FINISHED", "metrics.dev_ppl": 2.0}
            for p in range(1, 11):
                rec[f"metrics.src_contrib_p{p}"] = 0.6 - slope * p
            rows.append(rec)
    runs = pd.DataFrame(rows)
    fades = per_seed(runs, "src_contrib_fade")    # positions 1-3 against 8-10: 7 positions of the slope apart
    assert fades["base"] == {0: 0.0, 1: 0.0, 2: 0.0}
    assert fades["prefix"] == pytest.approx({0: 0.14, 1: 0.147, 2: 0.154})
    fade = next(c for c in check_claims("decoder_only", runs) if c["id"] == "source_attention_fades")
    assert fade["verdict"] == "holds" and fade["diff"] == pytest.approx(0.147)


def test_the_plots_tick_target_positions_at_whole_numbers(tmp_path, monkeypatch):
    """Positions 1 to 21 were ticked at 2.5, 7.5, 12.5 and 17.5 (matplotlib's default steps)."""
    import pandas as pd

    import harness.report.source_attention as sa
    figures = []
    monkeypatch.setattr(sa, "save_png", lambda fig, path: figures.append(fig) or path)
    rows = []
    for seed in range(2):
        rec = {"tags.row": "prefix", "status": "FINISHED"}
        for p in range(1, 22):
            rec[f"metrics.src_mass_p{p}"] = rec[f"metrics.src_mass_L1_p{p}"] = 0.9 - 0.02 * p + 0.01 * seed
        rows.append(rec)
    sa.source_attention_section(pd.DataFrame(rows), ["prefix"], tmp_path / "s.png")
    assert len(figures) == 2                                           # by position, and by layer
    for fig in figures:
        fig.draw_without_rendering()
        for ax in fig.axes:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks), ticks
