"""An int8 KV cache (TransformerConfig.kv_cache_dtype = "int8"; "model", the paper's, keeps the model's dtype):
every row of keys and values stored as int8 with a float16 scale, read back within half a quantization step;
its bytes per token are the formula's; cached decoding stays within quantization error of the full pass, with the
self-attention ring of a sliding window too; training never reads it."""

from __future__ import annotations

import pytest
import torch

from model import Transformer, beam_search, greedy
from model.attention import Int8Rows, KVCache, WindowKVCache
from model.config import ConfigError
from tests.helpers import small


def test_rows_read_back_within_half_a_step_of_their_scale():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 16) * torch.logspace(-3, 2, 5).view(1, 1, 5, 1)    # rows of very different sizes
    rows = Int8Rows.of(x)
    back = rows[:, :, :]
    step = x.abs().amax(-1, keepdim=True) / 127
    assert ((back - x).abs() <= 0.5 * step * 1.01 + 1e-7).all()
    assert rows.q.dtype == torch.int8 and rows.nbytes() == x.numel() + 2 * 3 * 5 * 2     # int8 + fp16 scales
    zeros = Int8Rows.of(torch.zeros(1, 1, 2, 4))                                           # no 0 / 0
    assert torch.equal(zeros[:, :, :], torch.zeros(1, 1, 2, 4)) and (zeros.scale > 0).all()
    rows[:, :, 1:2] = x[:, :, 3:4]                                                         # a slot rewritten
    torch.testing.assert_close(rows[:, :, 1:2], back[:, :, 3:4], atol=1e-6, rtol=1e-3)


@pytest.mark.parametrize("window", [0, 3])
def test_cached_decoding_stays_within_quantization_error_and_counts_the_formulas_bytes(window):
    torch.manual_seed(0)
    cfg = small(kv_cache_dtype="int8", attention_window=window, n_kv_heads=2)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 40, (2, 7))
    tgt = torch.randint(4, 40, (2, 10))
    memory, mask = model.encode(src)
    with torch.no_grad():
        full = model.out_proj(model.decode(tgt, memory, mask))
        cache = model.new_cache(2, 10, memory)
        steps = torch.stack([model.decode_step(tgt[:, t], memory, mask, cache, t) for t in range(10)], 1)
    assert (steps - full).abs().max() < 0.05 * full.abs().max()       # quantization noise, not a different model
    assert not torch.equal(steps, full)                               # it is quantized
    own, cross = cache[0]
    assert isinstance(own.k, Int8Rows) and isinstance(cross.k, Int8Rows)
    assert isinstance(own, WindowKVCache) == bool(window)
    slots = min(10, window + 1) if window else 10
    # per position a layer keeps kv_heads x (d_k + d_v) int8 numbers and 2 x kv_heads float16 scales
    per_token = cfg.n_kv_heads * (cfg.d_k + cfg.d_v) + 2 * cfg.n_kv_heads * 2
    assert own.nbytes() == 2 * slots * per_token and cross.nbytes() == 2 * 7 * per_token


def test_int8_decoding_agrees_with_the_models_own_cache_on_a_seeded_model():
    torch.manual_seed(3)
    plain = Transformer(small()).eval()
    torch.manual_seed(3)
    int8 = Transformer(small(kv_cache_dtype="int8")).eval()
    src = torch.randint(4, 40, (3, 8))
    assert greedy(int8, src, 2, 3, max_extra=8) == greedy(plain, src, 2, 3, max_extra=8)
    assert beam_search(int8, src, 2, 3, beam_size=3, max_extra=8) == beam_search(plain, src, 2, 3, beam_size=3,
                                                                                 max_extra=8)
    # teacher-forced scoring (training, dev PPL) reads no cache: the same numbers
    torch.testing.assert_close(int8(src, src), plain(src, src))


def test_a_bad_cache_dtype_is_one_sentence():
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        small(kv_cache_dtype="int4")
    assert KVCache().nbytes() == 0


def test_the_inference_formula_and_the_manifest_count_the_int8_cache():
    from harness.probes.inference import kv_formula
    from harness.probes.manifest import manifest
    from model import to_dict
    cfg = small(kv_cache_dtype="int8", n_kv_heads=2)
    per_layer = 2 * (8 + 8) + 2 * 2 * 2
    assert kv_formula(cfg, 4) == {"kv_bytes_per_token": 2 * per_layer, "kv_bytes_per_source_token": 2 * per_layer}
    m = manifest(to_dict(cfg))
    assert m["kv_bytes_per_token_int8"] == 2 * per_layer and m["kv_cache"].startswith("int8")
    assert "kv_cache" not in manifest(to_dict(small()))


def test_a_run_measures_its_bleu_with_an_int8_cache(tmp_path, capsys):
    """train.kv_int8_sentences: the final weights decode the first dev sentences with both caches, greedy and
    beam, and the run logs each BLEU and the difference; a family without the int8 cache is refused first."""
    from harness.cli import main
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.kv_int8_sentences=12", "model.d_model=32",
                             "model.d_ff=64", "model.n_layers=1", steps=30)
    assert metrics["kv_sentences"] == 12
    for search in ("greedy", "beam"):
        assert metrics[f"kv_{search}_bleu_delta"] == pytest.approx(
            metrics[f"kv_{search}_bleu_int8"] - metrics[f"kv_{search}_bleu_model"])
        assert 0 <= metrics[f"kv_{search}_bleu_int8"] <= 100
    assert main(["train", "--set", "model.family=rnn", "--set", "train.kv_int8_sentences=4", "--set",
                 "train.steps=1", "--out", str(tmp_path / "rnn")]) == 2
    assert "int8 cache" in capsys.readouterr().err


def test_probe_measure_takes_it_on_a_finished_run(tmp_path, capsys):
    """`probe measure RUN kv_int8 --set sentences=N`: the measurement on a run that did not take it; a name that is
    not one, or a setting it does not have, is one sentence."""
    import json

    from harness.cli import main
    from tests.helpers import train_small
    train_small(main, capsys, tmp_path, "transformer", "model.n_layers=1", steps=9)
    assert main(["probe", "measure", str(tmp_path / "run"), "kv_int8", "--set", "sentences=6", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["kv_sentences"] == 6 and "kv_beam_bleu_delta" in got
    assert main(["probe", "measure", str(tmp_path / "run"), "kv_int9"]) == 2
    assert "did you mean kv_int8" in capsys.readouterr().err
    assert main(["probe", "measure", str(tmp_path / "run"), "kv_int8", "--set", "sentenses=6"]) == 2
    assert "FIELD one of sentences" in capsys.readouterr().err
