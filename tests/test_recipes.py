"""Training recipes beside the paper's (harness/train/config.py): the rivals' optimizers, the constant-then-
decay schedule and gradient clipping, each a train setting whose default is the paper's."""

import json

import pytest
import torch

from harness.cli import main
from harness.errors import UserError
from harness.train import TrainConfig
from harness.train.config import learning_rate, make_optimizer, rate_at


def test_the_default_recipe_is_the_papers():
    cfg = TrainConfig()
    assert (cfg.optimizer, cfg.schedule, cfg.clip_norm) == ("adam", "noam", 0.0)
    assert all(rate_at(s, cfg, 512) == learning_rate(s, 512, 4000) for s in (1, 100, 4000, 90_000))
    assert isinstance(make_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg), torch.optim.Adam)


def test_constant_then_decay_halves_four_times_over_the_last_third():
    cfg = TrainConfig(schedule="constant_decay", lr=1e-3, steps=1200, warmup=100)
    assert rate_at(50, cfg, 512) == pytest.approx(5e-4)                  # linear warmup
    assert rate_at(100, cfg, 512) == rate_at(800, cfg, 512) == pytest.approx(1e-3)
    assert [rate_at(s, cfg, 512) for s in (801, 901, 1001, 1101, 1200)] == \
        pytest.approx([5e-4, 2.5e-4, 1.25e-4, 6.25e-5, 6.25e-5])


def test_nesterov_is_sgd_with_nesterov_momentum_and_bad_recipes_are_refused():
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], TrainConfig(optimizer="nesterov", momentum=0.99))
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["nesterov"] and opt.defaults["momentum"] == 0.99
    for bad in (dict(optimizer="adagrad"), dict(schedule="cosine"), dict(schedule="constant_decay"),
                dict(clip_norm=-1.0)):
        with pytest.raises(UserError):
            TrainConfig(**bad).validate()


def test_a_recipe_setting_the_schedule_does_not_read_is_named():
    assert TrainConfig().unread() == []
    assert TrainConfig(schedule="constant_decay", lr=1e-3, decay_times=2).unread() == []
    assert [m.split(" is ")[0] for m in TrainConfig(lr=1e-3, decay_factor=0.3, momentum=0.9).unread()] == \
        ["train.lr=0.001", "train.decay_factor=0.3", "train.momentum=0.9"]
    assert TrainConfig(schedule="constant_decay", lr=1.0, lr_patience=2).unread() == \
        ["train.lr_patience=2 is not read by schedule constant_decay, only by plateau."]
    with pytest.warns(UserWarning, match="train.lr=0.001 is not read by schedule noam"):
        TrainConfig(lr=1e-3).validate()


@pytest.mark.slow
def test_convs2s_trains_with_its_own_recipe_and_clipping(capsys, tmp_path, monkeypatch):
    clipped = []
    real = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda p, n: clipped.append(n) or real(p, n))
    out = tmp_path / "run"
    code = main(["train", "--set", "model.family=conv", "--set", "d_model=32", "--set", "d_hidden=32",
                 "--set", "n_enc_layers=2", "--set", "n_dec_layers=2", "--set", "train.steps=60",
                 "--set", "optimizer=nesterov", "--set", "schedule=constant_decay", "--set", "train.lr=0.25",
                 "--set", "warmup=1", "--set", "clip_norm=0.1", "--set", "decay_factor=0.1", "--set", "decay_times=1",
                 "--set", "max_tokens=800", "--set", "batch_tokens=800", "--set", "eval_every=30",
                 "--set", "log_every=10", "--set", "bleu_sentences=4", "--set", "max_extra=5",
                 "--set", "checkpoint_every=0",
                 "--set", "data.train_pairs=1000", "--set", "data.dev_pairs=8", "--set", "data.test_pairs=8",
                 "--set", "data.lexicon_scale=0.05", "--set", "data.max_words=12",
                 "--set", f"data.cache_dir={tmp_path / 'cache'}", "--out", str(out), "--quiet", "--json"])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert clipped == [0.1] * 60
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if "lr" in ln]
    assert (rows[0]["step"], rows[-1]["step"]) == (10, 60)
    assert rows[0]["lr"] == pytest.approx(0.25) and rows[-1]["lr"] == pytest.approx(0.025)
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1]
