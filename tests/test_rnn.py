"""The recurrent rival (model/rnn.py): its cached decoding is its teacher-forced decoder a token at a time,
padding does not reach the bidirectional encoder's real positions, and it trains through `harness train`."""

import pytest
import torch

from harness.cli import main
from model import build_model, count_parameters, with_settings
from model.rnn import RNNConfig
from tests.helpers import check_cached_decoding


def _model(**changes):
    torch.manual_seed(0)
    return build_model(RNNConfig(vocab_size=50, d_model=16, n_enc_layers=3, n_dec_layers=4, **changes)).eval()


def test_cached_steps_are_the_teacher_forced_decoder_a_token_at_a_time_and_padding_stays_out():
    check_cached_decoding(_model())
    check_cached_decoding(_model(attention="luong"))      # the input-feeding decoder's feed is in the cache


def test_luong_attention_feeds_its_output_to_the_next_step():
    """With input feeding, the output at step t depends on the tokens before t only through the recurrence and
    the fed-back attentional output: changing a later token leaves earlier outputs alone, and the bottom layer
    takes the embedding and the feed (2 d wide), the layers above the layer below (d)."""
    m = _model(attention="luong")
    assert m.dec_bottom.input_size == 32 and all(layer.input_size == 16 for layer in m.dec)
    src, tgt = torch.randint(4, 50, (2, 6)), torch.randint(4, 50, (2, 5))
    memory, mask = m.encode(src)
    a = m.decode(tgt, memory, mask)
    tgt2 = tgt.clone()
    tgt2[:, 3] = (tgt2[:, 3] + 1 - 4) % 46 + 4
    b = m.decode(tgt2, memory, mask)
    assert torch.allclose(a[:, :3], b[:, :3]) and not torch.allclose(a[:, 3:], b[:, 3:])
    d, additive, general = 16, 2 * 16 * 16 + 16 + 16, 16 * 16 + 2 * 16 * 16     # W_q, W_k + bias, v; W_a, W_c
    inputs = 4 * d * d * (1 - 3)       # W_ih: the bottom layer's input gains d, the three above lose d each
    assert sum(p.numel() for p in m.parameters()) == sum(p.numel() for p in _model().parameters()) + general \
        - additive + inputs


def test_a_wrong_attention_kind_is_one_sentence():
    with pytest.raises(Exception, match="attention must be one of additive, luong"):
        RNNConfig(attention="dot")


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
    from tests.helpers import train_small
    metrics, resolved = train_small(main, capsys, tmp_path, "rnn", "d_model=32", "warmup=40")
    assert resolved["family"] == "rnn" and resolved["n_enc_layers"] == 2
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < resolved["vocab_size"]           # it learns
    assert metrics["params"] == count_parameters(build_model(RNNConfig(**resolved))) and "dev_bleu" in metrics


@pytest.mark.slow
def test_the_luong_switch_trains_through_harness_train(capsys, tmp_path):
    from tests.helpers import train_small
    metrics, resolved = train_small(main, capsys, tmp_path, "rnn", "d_model=32", "warmup=40", "attention=luong",
                                    steps=60)
    assert resolved["attention"] == "luong"
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < resolved["vocab_size"]


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

    m = _model(attention="luong")        # Luong's decoder, a step at a time with the fed-back output

    def forward_luong():
        x = m.src_embed(src)
        x = torch.cat((lstm(m.enc_bi, x), lstm(m.enc_bi, x, True, "_reverse")), -1)
        for i, layer in enumerate(m.enc, start=2):
            x = lstm(layer, x) + (x if m._residual(i) else 0)
        layers = [m.dec_bottom, *m.dec]
        state = [(x.new_zeros(B, 16), x.new_zeros(B, 16)) for _ in layers]
        feed, outs = x.new_zeros(B, 16), []
        keys = m.attention.w_a(x)
        for t in range(T):
            y = torch.cat((m.tgt_embed(tgt[:, t]), feed), -1)
            for i, layer in enumerate(layers, start=1):
                h, c = state[i - 1]
                g_i, g_f, g_g, g_o = (y @ layer.weight_ih_l0.t() + h @ layer.weight_hh_l0.t() + layer.bias_ih_l0
                                      + layer.bias_hh_l0).chunk(4, -1)
                c = g_f.sigmoid() * c + g_i.sigmoid() * g_g.tanh()
                h = g_o.sigmoid() * c.tanh()
                state[i - 1] = (h, c)
                y = h + (y if m._residual(i) else 0)
            scores = (keys @ y[:, :, None]).squeeze(-1).softmax(-1)
            context = (scores[:, None] @ x).squeeze(1)
            feed = torch.tanh(m.attention.w_c(torch.cat((context, y), -1)))
            outs.append(feed)
        return m.out_proj(torch.stack(outs, 1))

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        logits = forward_luong()
    assert torch.allclose(logits, m.out_proj(m.hidden(src, tgt)), atol=1e-5)
    assert counter.get_total_flops() == 2 * count_analytic(m.cfg, B, S, T)["forward_macs"]
