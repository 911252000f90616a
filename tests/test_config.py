"""model/config.py: the paper_base preset against Table 3, derived fields, refused settings."""

import dataclasses

import pytest

from harness.paper import load_tables
from model import ConfigError, TransformerConfig
from model.config import paper_base

TABLE3 = load_tables()["table3"]["rows"]


def test_paper_base_preset_is_the_papers_base_row():
    base = TABLE3["base"]
    assert (paper_base.n_layers, paper_base.d_model, paper_base.d_ff, paper_base.n_heads, paper_base.d_k,
            paper_base.d_v, paper_base.p_drop) == (base["N"], base["d_model"], base["d_ff"], base["h"],
                                                  base["d_k"], base["d_v"], base["P_drop"])
    assert (paper_base.positional, paper_base.norm_position, paper_base.norm, paper_base.ffn,
            paper_base.share_embeddings, paper_base.vocab_size) == ("sinusoid", "post", "layer", "relu", True, 37000)
    with pytest.raises(Exception):
        paper_base.d_model = 1024                     # frozen


def test_replace_rederives_per_head_widths_as_row_a_does():
    assert paper_base.replace(n_heads=16).d_k == 32
    assert paper_base.replace(d_k=16).d_v == 64       # row B changes d_k alone
    assert paper_base.replace(n_layers=2).n_enc_layers == 2


def test_every_way_of_deriving_a_config_gives_the_same_config():
    two = dataclasses.replace(paper_base, n_layers=2)
    assert (two.n_enc_layers, two.n_dec_layers) == (2, 2)
    assert two == paper_base.replace(n_layers=2) == TransformerConfig(n_layers=2)
    sixteen = dataclasses.replace(paper_base, n_heads=16)
    assert sixteen == paper_base.replace(n_heads=16) == TransformerConfig(n_heads=16) and sixteen.d_k == 32
    assert dataclasses.replace(paper_base, d_model=256).d_v == 32
    # A value set by hand (other than what its rule gives) stays when its sources change.
    deep_encoder = dataclasses.replace(paper_base, n_layers=2, n_enc_layers=6)
    assert (deep_encoder.n_enc_layers, deep_encoder.n_dec_layers) == (6, 2)
    assert dataclasses.replace(TransformerConfig(d_k=16), n_heads=16).d_k == 16
    assert dataclasses.replace(TransformerConfig(n_kv_heads=2), n_heads=16).n_kv_heads == 2
    # The config as a dict (MLflow, config.json, a study's trials) holds the resolved numbers as plain ints,
    # and builds the same config again.
    as_dict = paper_base.to_dict()
    assert as_dict["d_k"] == 64 and type(as_dict["d_k"]) is int and type(as_dict["n_enc_layers"]) is int
    assert TransformerConfig(**as_dict) == paper_base
    assert TransformerConfig(**as_dict).replace(n_layers=2).n_dec_layers == 2


@pytest.mark.parametrize("bad, message", [
    (dict(d_model=500, n_heads=8), "not divisible"),
    (dict(n_kv_heads=3), "must divide"),
    (dict(positional="absolute"), "positional must be one of"),
    (dict(p_drop=1.5), "p_drop"),
    (dict(d_ff=0), "d_ff"),
    (dict(positional="rope", d_k=7, d_v=7), "even"),
])
def test_impossible_configs_are_refused_with_the_field_named(bad, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig(**bad)


def test_unknown_field_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean d_model"):
        paper_base.replace(d_modle=256)


def test_every_preset_has_its_model_and_its_training_settings():
    """One table of presets: model/config.py's PRESETS and the training settings that go with each."""
    from harness.train import TRAIN_PRESETS, preset
    from model.config import PRESETS
    assert set(TRAIN_PRESETS) == set(PRESETS)
    for name in PRESETS:
        model, train = preset(name)
        assert model is PRESETS[name] and train is TRAIN_PRESETS[name]
    with pytest.raises(ConfigError, match="now called 'cpu_d128'"):
        preset("tiny")
