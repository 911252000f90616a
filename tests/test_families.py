"""The model-family seam: a family defined in this file alone, registered with one line, trains through
`python -m harness train`, is decoded by beam search and rescored by `evaluate`, with nothing outside this
file changed. It stands for the rivals and the decoder-only model to come."""

import dataclasses
import json

import pytest
import torch
from torch import nn

from harness.cli import main
from model import FAMILIES, build_model, config_from_dict, register, with_settings
from model.config import ConfigError
from model.loss import vocab_loss


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """A bigram model conditioned on the mean of the source's embeddings: the least a translation model can be."""
    vocab_size: int = 100
    d_model: int = 32
    p_drop: float = 0.0
    pad_id: int = 0
    max_len: int = 128
    family: str = "toy"


class ToyModel(nn.Module):
    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def encode(self, src, packed=None):
        keep = (src != self.cfg.pad_id).float()[..., None]
        mean = (self.src_embed(src) * keep).sum(1, keepdim=True) / keep.sum(1, keepdim=True).clamp(min=1)
        return mean, None                                                   # memory (B, 1, d)

    def decode(self, tgt_in, memory, mask, packing=None):
        return torch.tanh(self.tgt_embed(tgt_in) + memory)                  # (B, T, d)

    def hidden(self, src, tgt_in, packing=None):
        memory, mask = self.encode(src)
        return self.decode(tgt_in, memory, mask)

    def loss(self, src, tgt_in, tgt_out, label_smoothing=0.0, hidden=None, packing=None):
        hidden = self.hidden(src, tgt_in) if hidden is None else hidden
        keep = tgt_out != self.cfg.pad_id
        loss, nll = vocab_loss(hidden[keep], self.out_proj.weight, tgt_out[keep], label_smoothing, "plain")
        return loss, nll.detach(), int(keep.sum())

    def new_cache(self, batch, max_len, like):
        return []                                  # a bigram model needs only the last token

    def reorder_cache(self, cache, rows):
        pass

    def decode_step(self, tokens, memory, mask, cache, offset, positions=None):
        return self.out_proj(self.decode(tokens[:, None], memory, mask)[:, -1])


@pytest.fixture
def toy_family():
    register("toy", ToyConfig, ToyModel, "a bigram model of the source's mean (tests/test_families.py)")
    yield
    FAMILIES.pop("toy")


def test_toy_family_trains_and_evaluates_through_the_cli(toy_family, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--preset", "cpu_d128", "--set", "model.family=toy", "--set", "d_model=24",
                 "--set", "train.steps=30", "--set", "warmup=10", "--set", "max_tokens=800",
                 "--set", "batch_tokens=800", "--set", "bleu_sentences=4", "--set", "max_extra=4",
                 "--set", "beam_size=3", "--set", "eval_every=15", "--set", "checkpoint_every=15",
                 "--set", "vocab_size=300", "--set", "data.train_pairs=400", "--set", "data.dev_pairs=8",
                 "--set", "data.test_pairs=8", "--set", f"data.cache_dir={tmp_path / 'cache'}",
                 "--out", str(out), "--quiet", "--json"])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    resolved = json.loads((out / "config.json").read_text())["model"]
    # The config names its family and keeps the settings the two families share (tiny's max_len 512).
    assert resolved == {"vocab_size": resolved["vocab_size"], "d_model": 24, "p_drop": 0.1, "pad_id": 0,
                        "max_len": 512, "family": "toy"}
    # Three tensors of the toy's shapes, nothing of the Transformer's.
    v = resolved["vocab_size"]
    assert metrics["params"] == 3 * v * 24
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < v              # it learns, from about uniform over the vocabulary
    assert "dev_bleu" in metrics                       # beam search decoded it
    # evaluate reads config.json back into the toy's config and rescores the final weights
    assert main(["evaluate", str(out), "--data", str(_prepared(tmp_path)), "--split", "dev", "--no-log",
                 "--json"]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["dev_ppl"] > 1


def _prepared(tmp_path):
    """A prepared translation directory of a few lines (what `evaluate --data` reads)."""
    d = tmp_path / "prepared"
    d.mkdir()
    for split in ("train", "dev", "test"):
        (d / f"{split}.en").write_text("the cat sat\na dog ran\n")
        (d / f"{split}.de").write_text("die katze sass\nein hund lief\n")
    return d


def test_switching_family_carries_shared_settings_and_refuses_unknown_ones(toy_family):
    from model import get_preset
    toy = with_settings(get_preset("cpu_d128"), family="toy", d_model=16)
    assert (toy.family, toy.d_model, toy.vocab_size, toy.max_len) == ("toy", 16, 8000, 512)
    assert isinstance(build_model(toy), ToyModel)
    assert config_from_dict(dataclasses.asdict(toy)) == toy
    with pytest.raises(ConfigError, match="unknown toy setting 'n_heads'"):
        config_from_dict({**dataclasses.asdict(toy), "n_heads": 4})
    with pytest.raises(ConfigError, match="did you mean toy"):
        with_settings(toy, family="tyo")


def test_a_family_config_must_name_itself():
    with pytest.raises(ConfigError, match="needs a field family = 'other'"):
        register("other", ToyConfig, ToyModel, "misnamed")
    assert "other" not in FAMILIES


def test_stored_transformer_settings_without_a_family_are_the_transformers():
    from model import TransformerConfig
    settings = TransformerConfig(vocab_size=50, d_model=32, n_heads=4).to_dict()
    settings.pop("family")                        # config.json of a run made before families existed
    assert config_from_dict(settings) == TransformerConfig(vocab_size=50, d_model=32, n_heads=4)
