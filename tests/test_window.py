"""Sliding-window self-attention (TransformerConfig.attention_window = r; 0, the paper's full attention): a key is
visible within r positions of its query (and before it, in the decoder), against a reference written with loops;
every kernel path gives it, the cached step keeps at most r + 1 keys and decodes what the full pass does, and a
window as long as the sentence is full attention."""

from __future__ import annotations

import math

import pytest
import torch

from model import Transformer, greedy
from model.attention import MultiHeadAttention, WindowKVCache
from model.config import ConfigError
from model.kernels import Kernels
from tests.helpers import small


def loop_reference(mha: MultiHeadAttention, x: torch.Tensor, keep: torch.Tensor, r: int, causal: bool) -> torch.Tensor:
    """The layer's output by loops: for each sentence, head and query i, softmax over the keys j with |i - j| <= r
    (0 <= i - j <= r where causal) that are not padding (keep[b, j]), then W^O."""
    q, k, v = mha._project(x, None, None)                         # (B, h, T, d)
    B, h, T, d = q.shape
    out = torch.zeros(B, h, T, v.size(-1))
    for b in range(B):
        for head in range(h):
            for i in range(T):
                js = [j for j in range(T) if (0 <= i - j <= r if causal else abs(i - j) <= r) and keep[b, j]]
                js = js or [i]                                    # a padding query whose window is all padding
                scores = torch.stack([q[b, head, i] @ k[b, head, j] / math.sqrt(d) for j in js])
                weights = scores.softmax(0)
                out[b, head, i] = sum(w * v[b, head, j] for w, j in zip(weights, js))
    return mha.out_proj(out.transpose(1, 2).reshape(B, T, h * v.size(-1)))


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
@pytest.mark.parametrize("causal", [False, True])
def test_each_kernel_matches_the_loop_reference(kernel, causal):
    torch.manual_seed(0)
    cfg = small(attention_window=2)
    mha = MultiHeadAttention(cfg, kernels=Kernels.choose(kernel, "cpu")).eval()
    x = torch.randn(2, 9, cfg.d_model)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 6:] = False                                           # sentence 1 has 6 tokens, then padding
    with torch.no_grad():
        got = mha(x, mask=None if causal else keep[:, None, None, :], causal=causal)
        want = loop_reference(mha, x, keep if not causal else torch.ones_like(keep), 2, causal)
    real = keep if not causal else torch.ones_like(keep)
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    mha.window = 0                                                # the same weights, full attention: not the same
    with torch.no_grad():
        full = mha(x, mask=None if causal else keep[:, None, None, :], causal=causal)
    assert not torch.allclose(full[real], got[real], atol=1e-3)
    assert torch.isfinite(got).all()                              # padding queries too: no row masked whole


def test_the_window_bounds_what_a_position_can_see():
    """N layers of window r: output i depends on input j only where |i - j| <= r N (the encoder), and a window as
    long as the sentence is the paper's full attention."""
    torch.manual_seed(0)
    model = Transformer(small(attention_window=1, n_layers=2)).eval()
    src = torch.randint(4, 40, (1, 10))
    memory = model.encode(src)[0]
    changed = src.clone()
    changed[0, 9] = 4 if src[0, 9] != 4 else 5                    # the last word: 9 - 2 x 1 = 7 is the edge
    delta = (model.encode(changed)[0] - memory).abs().amax(-1)[0]
    assert (delta[:7] == 0).all() and (delta[7:] > 0).all()
    torch.manual_seed(0)
    full = Transformer(small()).eval()
    torch.manual_seed(0)
    wide = Transformer(small(attention_window=10)).eval()
    torch.testing.assert_close(wide(src, src), full(src, src))


def test_cached_decoding_keeps_at_most_r_plus_one_keys_and_decodes_as_the_full_pass():
    torch.manual_seed(0)
    model = Transformer(small(attention_window=3)).eval()
    src = torch.randint(4, 40, (2, 7))
    tgt = torch.randint(4, 40, (2, 12))
    memory, mask = model.encode(src)
    full = model.out_proj(model.decode(tgt, memory, mask))
    cache = model.new_cache(2, 12, memory)
    steps = torch.stack([model.decode_step(tgt[:, t], memory, mask, cache, t) for t in range(12)], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    own = cache[0][0]
    assert isinstance(own, WindowKVCache) and own.k.size(2) == 4           # r + 1 slots, not 12
    assert own.nbytes() == 2 * 2 * 4 * 4 * 8 * 4                             # k and v, B 2, h 4, 4 slots, d_k 8, fp32
    assert sorted(own.key_positions().tolist()) == [8, 9, 10, 11]
    assert greedy(model, src, bos=2, eos=3, max_extra=8) == greedy(model, src, bos=2, eos=3, max_extra=8,
                                                                   use_cache=False)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_a_bad_window_is_one_sentence(bad):
    with pytest.raises(ConfigError, match="attention_window must be a whole number of positions >= 0"):
        small(attention_window=bad)
