"""RoPE position interpolation measured (harness/eval/rope_pi.py, the measurement rope_pi): two fine-tunes from the
same final weights, plain and interpolated, each scored on the length buckets; the weights and the rotation are put
back afterwards; a model without RoPE is refused before training."""

from __future__ import annotations

import json
import math

import pytest
import torch


def test_a_run_fine_tunes_both_ways_and_logs_the_buckets_and_the_gain(tmp_path, capsys):
    from harness.cli import main
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "model.positional=rope", "train.rope_pi_steps=3",
                             "train.rope_pi_factor=2", "train.rope_pi_sentences=40", "train.rope_pi_per_bucket=4",
                             steps=12)
    assert metrics["pi_factor"] == 2 and metrics["pi_steps"] == 3 and metrics["pi_finetune_pairs"] > 0
    for b in range(5):
        assert metrics[f"pi_plain_b{b}_ppl"] > 0 and metrics[f"pi_interp_b{b}_ppl"] > 0
        gain = math.log(metrics[f"pi_plain_b{b}_ppl"]) - math.log(metrics[f"pi_interp_b{b}_ppl"])
        assert metrics[f"pi_gain_b{b}_nll"] == pytest.approx(gain)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["rope_pi_steps"] == 3


def test_the_weights_and_the_rotation_are_restored():
    """pi_metrics fine-tunes the model itself twice; afterwards its weights, its rotation and its config are what
    they were (a toy tokenizer: one id a word)."""
    from harness.data.corpus import DataConfig
    from harness.eval.rope_pi import pi_metrics
    from model import Transformer
    from model.layers import Rotary
    from tests.helpers import small

    class Words:
        def encode(self, texts):
            return [[4 + sum(map(ord, w)) % 36 for w in t.split()] for t in texts]

        def decode(self, ids):
            return [" ".join(str(i) for i in x) for x in ids]

    torch.manual_seed(0)
    model = Transformer(small(positional="rope"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rot = next(m for m in model.modules() if isinstance(m, Rotary))
    cos = rot.cos.clone()
    got = pi_metrics(model, Words(), DataConfig(max_words=9, lexicon_scale=0.05), steps=2, factor=2.0, sentences=20,
                     per_bucket=2, lr=1e-3, max_tokens=200, label_smoothing=0.1, device=torch.device("cpu"),
                     autocast=lambda: torch.autocast("cpu", enabled=False), beam_size=1, alpha=0.6, max_extra=3,
                     lang="de", moses="2025")
    assert "pi_gain_b0_nll" in got and got["pi_finetune_pairs"] > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.cfg.rope_scale == 1.0 and torch.equal(rot.cos, cos)


def test_a_model_without_rope_is_refused_first(tmp_path, capsys):
    from harness.cli import main
    code = main(["train", "--set", "train.rope_pi_steps=5", "--set", "train.steps=1", "--out", str(tmp_path / "r")])
    assert code == 2 and "needs model.positional rope" in capsys.readouterr().err
