"""The decoder-only family (model/decoder_only.py): the one-pass training forward, the prefill and the cached
steps compute the same states; the masks are PrefixLM's and CausalLM's; padding does not move a sentence; the
source loss is the source's next-token loss; parameters and FLOPs match their formulas; bad settings are one
sentence; it trains and decodes through `harness train`."""

import pytest
import torch

from harness.cli import main
from model import ConfigError, beam_search, build_model, count_parameters, greedy
from model.decoder_only import DecoderOnlyConfig
from tests.helpers import check_cached_decoding, rival_batch

VARIANTS = {
    "prefix": {},
    "causal": dict(lm="causal"),
    "causal_source_loss": dict(lm="causal", source_loss=True),
    "learned": dict(positional="learned"),
    "rope": dict(positional="rope"),
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "dk_dv": dict(d_k=6, d_v=10),
    "unshared": dict(share_embeddings=False),
    "redesign": dict(positional="rope", norm_position="pre", norm="rms", ffn="swiglu", n_kv_heads=2),
}


def _model(**changes):
    torch.manual_seed(0)
    settings = dict(vocab_size=50, d_model=16, d_ff=32, n_heads=4, n_layers=3, p_drop=0.0, max_len=64)
    return build_model(DecoderOnlyConfig(**{**settings, **changes})).eval()


@pytest.mark.parametrize("variant", VARIANTS)
def test_training_pass_prefill_and_cached_steps_agree(variant):
    m = _model(**VARIANTS[variant])
    check_cached_decoding(m)                      # steps == uncached decode; beam search with and without cache
    src, tgt = rival_batch()
    memory, mask = m.encode(src)
    one_pass = m.hidden(src, tgt)                 # the training forward: source and target in one sequence
    assert torch.allclose(one_pass, m.decode(tgt, memory, mask), atol=1e-5)


@pytest.mark.parametrize("variant", ["prefix", "causal", "rope"])
def test_a_sentence_decodes_as_it_would_alone_whatever_the_padding(variant):
    m = _model(**VARIANTS[variant])
    src, tgt = rival_batch()                      # row 2 has 3 real source tokens of 7
    batched = m.hidden(src, tgt)[2]
    alone = m.hidden(src[2:3, :3], tgt[2:3])[0]
    assert torch.allclose(batched, alone, atol=1e-5)
    assert greedy(m, src, 1, 2, max_extra=4)[2] == greedy(m, src[2:3, :3], 1, 2, max_extra=4)[0]


def test_the_masks_are_prefixlm_and_causallm():
    src, tgt = rival_batch()
    changed_src = src.clone()
    changed_src[0, -1] = (src[0, -1] + 1) % 46 + 4          # the last source token of an unpadded row
    changed_tgt = tgt.clone()
    changed_tgt[:, 3] = (tgt[:, 3] + 1) % 46 + 4
    for lm in ("prefix", "causal"):
        m = _model(lm=lm)
        states = m.loss_states(src, tgt)
        src_states = m.loss_states(changed_src, tgt)
        # PrefixLM: every source position sees the whole source; CausalLM: none sees a later one.
        earlier_moved = not torch.allclose(states[0, :6], src_states[0, :6], atol=1e-6)
        assert earlier_moved == (lm == "prefix")
        # Both: the target is causal, and no source position sees the target.
        tgt_states = m.loss_states(src, changed_tgt)
        S = src.size(1)
        assert torch.allclose(states[:, :S + 3], tgt_states[:, :S + 3], atol=1e-6)
        assert not torch.allclose(states[:, S + 3:], tgt_states[:, S + 3:], atol=1e-6)


def test_the_source_loss_is_the_sources_next_token_loss_and_the_nll_stays_the_targets():
    src, tgt_in = rival_batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((3, 1), 2)], 1)
    plain, with_source = _model(lm="causal"), _model(lm="causal", source_loss=True)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), with_source.parameters()))
    loss, nll, n = plain.loss(src, tgt_in, tgt_out, 0.1)
    loss_s, nll_s, n_s = with_source.loss(src, tgt_in, tgt_out, 0.1)
    states = plain.loss_states(src, tgt_in)
    nxt, keep = src[:, 1:], src[:, 1:] != 0
    logits = plain.out_proj(states[:, :src.size(1) - 1][keep])
    expected = torch.nn.functional.cross_entropy(logits, nxt[keep], reduction="sum", label_smoothing=0.1)
    assert torch.allclose(loss_s - loss, expected, atol=1e-4) and torch.equal(nll, nll_s) and n == n_s
    # The compiled path hands `loss` the states of `loss_states`; the result is the same.
    again = with_source.loss(src, tgt_in, tgt_out, 0.1, hidden=with_source.loss_states(src, tgt_in))
    assert torch.allclose(again[0], loss_s, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_parameters_match_the_formula(variant):
    from harness.probes.flops import decoder_only_parameters
    m = _model(**VARIANTS[variant])
    assert count_parameters(m) == decoder_only_parameters(m.cfg)


@pytest.mark.parametrize("variant", ["prefix", "causal_source_loss", "gqa", "redesign"])
def test_the_analytic_flops_are_what_torchs_counter_sees(variant):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from harness.probes.flops import count_analytic
    from model.decoder_only import DecoderOnly
    cfg = _model(**VARIANTS[variant]).cfg
    m = DecoderOnly(cfg, kernel="sdpa", loss_impl="plain").eval()
    B, S, T = 2, 7, 5
    src, tgt = torch.randint(4, 50, (B, S)), torch.randint(4, 50, (B, T))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        m.loss(src, tgt, tgt, 0.1)
    assert counter.get_total_flops() == 2 * count_analytic(cfg, B, S, T)["forward_macs"]


def test_impossible_settings_are_refused():
    with pytest.raises(ConfigError, match="source_loss needs lm=causal"):
        DecoderOnlyConfig(source_loss=True)
    with pytest.raises(ConfigError, match="lm must be one of prefix, causal"):
        DecoderOnlyConfig(lm="both")
    m = _model(max_len=10)
    with pytest.raises(ValueError, match="raise max_len"):
        m.hidden(*rival_batch())


def test_bad_settings_are_one_sentence(capsys, tmp_path):
    code = main(["train", "--set", "model.family=decoder_only", "--set", "lm=bidirectional",
                 "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "lm must be one of prefix, causal" in err and len(err.strip().splitlines()) == 1
    code = main(["train", "--set", "model.family=decoder_only", "--set", "n_enc_layers=2",
                 "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and "n_enc_layers" in err and len(err.strip().splitlines()) == 1


def test_beam_search_keeps_each_sentences_cache_rows():
    m = _model(lm="causal")
    src, _ = rival_batch()
    out = beam_search(m, src, 1, 2, beam_size=3, max_extra=6)
    alone = [beam_search(m, src[i:i + 1, :int((src[i] != 0).sum())], 1, 2, beam_size=3, max_extra=6)[0]
             for i in range(3)]
    assert out == alone


@pytest.mark.slow
def test_decoder_only_trains_and_decodes_through_harness_train(capsys, tmp_path):
    from tests.helpers import train_small
    # Half the paper's rate: at the full one this post-norm stack of 4 at d_model 32 sits at the edge of
    # divergence, and whether it learns in 120 steps turns on the thread count's rounding.
    metrics, resolved = train_small(main, capsys, tmp_path, "decoder_only", "d_model=32", "d_ff=64", "n_heads=4",
                                    "n_layers=4", "warmup=40", "lr_scale=0.5")
    assert resolved["family"] == "decoder_only" and resolved["lm"] == "prefix"
    curve = metrics["dev_ppl_curve"]
    assert curve[-1][1] < curve[0][1] < resolved["vocab_size"]           # it learns
    assert metrics["params"] == count_parameters(build_model(DecoderOnlyConfig(**resolved))) and "dev_bleu" in metrics
    import json
    arch = json.loads((tmp_path / "run" / "architecture.json").read_text())       # the run's manifest beside it
    assert (arch["architecture"], arch["layers"]) == ("decoder-only (PrefixLM)", "4")


def test_the_architecture_manifest_names_the_shape_and_counts_the_kv_cache():
    from harness.probes.manifest import manifest
    from model import to_dict
    from model.config import paper_base
    enc_dec = manifest(to_dict(paper_base))
    assert (enc_dec["architecture"], enc_dec["attention"], enc_dec["layers"]) == ("encoder-decoder", "mha", "6 + 6")
    assert enc_dec["kv_bytes_per_target_token_bf16"] == 2 * 6 * 8 * 64 * 2           # 2 x layers x heads x d x bytes
    redesign = manifest(to_dict(DecoderOnlyConfig(n_kv_heads=2, positional="rope", norm="rms", norm_position="pre",
                                                  ffn="swiglu", d_ff=1984)))
    assert redesign["architecture"] == "decoder-only (PrefixLM)" and redesign["attention"] == "gqa"
    per_token = 2 * 12 * 2 * 64 * 2
    assert redesign["kv_bytes_per_target_token_bf16"] == redesign["kv_bytes_per_source_token_bf16"] == per_token
    assert (redesign["norm"], redesign["positions"]) == ("RMSNorm, pre-norm", "rope")
    # MLflow keeps params as text: the same manifest from strings
    assert manifest({k: str(v) for k, v in to_dict(paper_base).items()}) == enc_dec
    mqa = manifest(to_dict(DecoderOnlyConfig(n_kv_heads=1, lm="causal")))
    assert (mqa["attention"], mqa["architecture"]) == ("mqa", "decoder-only (CausalLM)")
    # the decoder-only cache, measured, is the formula's per token
    m = _model(n_kv_heads=2)
    memory, _ = m.encode(torch.randint(4, 50, (1, 5)))
    cache = m.new_cache(1, 3, memory)
    per_token = manifest(to_dict(m.cfg))["kv_bytes_per_target_token_bf16"]
    assert cache.nbytes() == (5 + 3) * per_token * 2  # float32: twice bf16
