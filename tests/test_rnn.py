"""The recurrent rival (model/rnn.py): its cached decoding is its teacher-forced decoder a token at a time,
padding does not reach the bidirectional encoder's real positions, and it trains through `harness train`."""

import pytest
import torch
from small_models import check_cached_decoding

from harness.cli import main
from model import build_model, count_parameters, with_settings
from model.rnn import RNNConfig


def _model(**changes):
    torch.manual_seed(0)
    return build_model(RNNConfig(vocab_size=50, d_model=16, n_enc_layers=3, n_dec_layers=4, **changes)).eval()


def test_cached_steps_are_the_teacher_forced_decoder_a_token_at_a_time_and_padding_stays_out():
    check_cached_decoding(_model())


def test_residuals_start_at_the_third_layer():
    m = _model()
    assert [m._residual(i) for i in (1, 2, 3, 4)] == [False, False, True, True]
    assert not any(_model(residual_from=9)._residual(i) for i in range(1, 9))


def test_the_family_is_one_setting_and_refuses_what_it_does_not_have(capsys, tmp_path):
    from model import get_preset
    cfg = with_settings(get_preset("cpu_d128"), family="rnn")
    assert isinstance(cfg, RNNConfig) and cfg.d_model == 128 and cfg.vocab_size == 8000
    code = main(["train", "--set", "model.family=rnn", "--set", "n_heads=4", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "n_heads" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_rnn_trains_and_decodes_through_harness_train(capsys, tmp_path):
    from small_models import train_small
    metrics, resolved = train_small(main, capsys, tmp_path, "rnn", "d_model=32", "warmup=40")
    assert resolved["family"] == "rnn" and resolved["n_enc_layers"] == 2
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < resolved["vocab_size"]           # it learns
    assert metrics["params"] == count_parameters(build_model(RNNConfig(**resolved))) and "dev_bleu" in metrics


def test_the_analytic_flops_are_what_a_counter_sees_of_the_same_arithmetic_written_out():
    """torch's FlopCounterMode cannot see inside nn.LSTM's fused CPU kernel, so the check writes each LSTM out
    with the module's own weights (x W_ih^T + h W_hh^T per step) and counts that forward; the written-out
    model must give the module's output, and its counted multiply-adds the analytic formula's."""
    from torch.utils.flop_counter import FlopCounterMode

    from harness.probes.flops import count_analytic
    m = _model()
    B, S, T = 2, 7, 5
    src, tgt = torch.randint(4, 50, (B, S)), torch.randint(4, 50, (B, T))

    def lstm(layer, x, reverse=False, suffix=""):
        w_ih, w_hh = getattr(layer, "weight_ih_l0" + suffix), getattr(layer, "weight_hh_l0" + suffix)
        bias = getattr(layer, "bias_ih_l0" + suffix) + getattr(layer, "bias_hh_l0" + suffix)
        h = c = x.new_zeros(x.size(0), layer.hidden_size)
        outs = []
        for t in (reversed(range(x.size(1))) if reverse else range(x.size(1))):
            i, f, g, o = (x[:, t] @ w_ih.t() + h @ w_hh.t() + bias).chunk(4, -1)
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
            outs.append(h)
        return torch.stack(outs[::-1] if reverse else outs, 1)

    def forward():
        x = m.src_embed(src)
        x = torch.cat((lstm(m.enc_bi, x), lstm(m.enc_bi, x, True, "_reverse")), -1)
        for i, layer in enumerate(m.enc, start=2):
            x = lstm(layer, x) + (x if m._residual(i) else 0)
        s = lstm(m.dec_bottom, m.tgt_embed(tgt))
        context = m.attention(s, m.attention.keys(x), x, None)
        y = s
        for i, layer in enumerate(m.dec, start=2):
            y = lstm(layer, torch.cat((y, context), -1)) + (y if m._residual(i) else 0)
        return m.out_proj(y)

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        logits = forward()
    assert torch.allclose(logits, m.out_proj(m.hidden(src, tgt)), atol=1e-5)
    assert counter.get_total_flops() == 2 * count_analytic(m.cfg, B, S, T)["forward_macs"]
