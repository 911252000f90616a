"""The convolutional rival (model/conv.py): cached decoding is its teacher-forced decoder a token at a time,
padding does not reach real positions, the encoder's gradients are scaled as §3.4 says, its FLOPs are what
torch's counter sees, and it trains through `harness train`."""

import pytest
import torch

from harness.cli import main
from model import build_model, count_parameters
from model.conv import ConvConfig
from tests.helpers import check_cached_decoding, rival_batch


def _model(**changes):
    torch.manual_seed(0)
    settings = dict(vocab_size=50, d_model=12, d_hidden=16, n_enc_layers=3, n_dec_layers=3, p_drop=0.1)
    return build_model(ConvConfig(**{**settings, **changes})).eval()


@pytest.mark.parametrize("kernel", [3, 5, 1])
def test_cached_steps_are_the_teacher_forced_decoder_a_token_at_a_time_and_padding_stays_out(kernel):
    check_cached_decoding(_model(kernel=kernel))


def test_the_encoders_gradients_are_scaled_by_one_over_twice_the_attention_layers(monkeypatch):
    from model import conv
    scales = []
    real = conv._ScaleGrad.apply
    monkeypatch.setattr(conv._ScaleGrad, "apply", lambda x, s: scales.append(s) or real(x, s))
    m = _model(n_dec_layers=4)
    m.encode(rival_batch()[0])
    assert scales == [1 / 8]
    x = torch.ones(3, requires_grad=True)
    real(x, 0.25).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 0.25))


def test_the_analytic_flops_are_what_torchs_counter_sees():
    from torch.utils.flop_counter import FlopCounterMode

    from harness.probes.flops import count_analytic
    m = _model(n_dec_layers=2, p_drop=0.0)
    B, S, T = 2, 7, 5
    src, tgt = torch.randint(4, 50, (B, S)), torch.randint(4, 50, (B, T))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        m.out_proj(m.hidden(src, tgt))
    assert counter.get_total_flops() == 2 * count_analytic(m.cfg, B, S, T)["forward_macs"]


def test_bad_settings_are_one_sentence(capsys, tmp_path):
    code = main(["train", "--set", "model.family=conv", "--set", "kernel=4", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "kernel must be odd" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_convs2s_trains_and_decodes_through_harness_train(capsys, tmp_path):
    from tests.helpers import train_small
    metrics, resolved = train_small(main, capsys, tmp_path, "conv", "d_model=32", "d_hidden=32", "n_enc_layers=2",
                                    "n_dec_layers=2", "warmup=40")
    assert resolved["family"] == "conv" and resolved["kernel"] == 3
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < resolved["vocab_size"]           # it learns
    assert metrics["params"] == count_parameters(build_model(ConvConfig(**resolved))) and "dev_bleu" in metrics
