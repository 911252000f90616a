"""§3.2.1's alternatives to the paper's scaled dot product (TransformerConfig.attention_score): unscaled dot
products and Bahdanau's additive score, held to references written out element by element."""

import math

import pytest
import torch

from model import ConfigError, Transformer, TransformerConfig, beam_search, count_parameters, greedy
from model.kernels import Packed, additive_scores, attend, attend_packed
from tests.helpers import check_cached_decoding


def _by_hand(q, k, v, score, mask=None, causal=False, w=None):
    """Attention one query at a time with Python loops: score_ij = q_i . k_j (unscaled), w . tanh(q_i + k_j)
    (additive) or q_i . k_j / sqrt(d_k) (scaled), then a softmax over the allowed keys and the weighted sum."""
    B, h, T, d = q.shape
    S = k.size(2)
    out = torch.zeros(B, h, T, v.size(-1), dtype=torch.float64)
    for b in range(B):
        for i in range(h):
            for t in range(T):
                scores = []
                for s in range(S):
                    allowed = (mask is None or bool(mask[b, 0, 0, s])) and (not causal or s <= t)
                    if not allowed:
                        scores.append(-math.inf)
                    elif score == "additive":
                        scores.append(sum(float(w[i, j]) * math.tanh(float(q[b, i, t, j] + k[b, i, s, j]))
                                          for j in range(d)))
                    else:
                        dot = sum(float(q[b, i, t, j] * k[b, i, s, j]) for j in range(d))
                        scores.append(dot if score == "unscaled" else dot / math.sqrt(d))
                top = max(scores)
                weights = [math.exp(x - top) for x in scores]
                total = sum(weights)
                for s in range(S):
                    out[b, i, t] += weights[s] / total * v[b, i, s].double()
    return out


def _tensors(seed=0, B=2, h=2, T=3, S=4, d=5, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (spread * torch.randn(B, h, n, d, generator=g) for n in (T, S, S))
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    mask[1, :, :, 3:] = False
    return q, k, v, mask


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
@pytest.mark.parametrize("causal", [False, True])
def test_unscaled_dot_products_equal_the_reference_written_out(kernel, causal):
    q, k, v, mask = _tensors(spread=2.0)
    if causal:
        k, v = k[:, :, :3], v[:, :, :3]                       # causal self-attention: as many keys as queries
        mask = mask[..., :3]
    want = _by_hand(q, k, v, "unscaled", mask, causal)
    got = attend(q, k, v, mask, causal, kernel=kernel, scale=1.0)
    assert torch.allclose(got.double(), want, atol=1e-5)
    # The paper's scaled product is the same code path with its own factor, and differs from it.
    scaled = attend(q, k, v, mask, causal, kernel=kernel)
    assert torch.allclose(scaled.double(), _by_hand(q, k, v, "scaled", mask, causal), atol=1e-5)
    assert not torch.allclose(scaled, got, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_additive_scores_equal_bahdanaus_written_out(causal):
    q, k, v, mask = _tensors(seed=1)
    w = torch.randn(2, 5, generator=torch.Generator().manual_seed(2))
    if causal:
        k, v, mask = k[:, :, :3], v[:, :, :3], mask[..., :3]
    got = attend(q, k, v, mask, causal, kernel="sdpa", additive=w)     # the kernel name is not used by additive
    assert torch.allclose(got.double(), _by_hand(q, k, v, "additive", mask, causal, w), atol=1e-5)
    one = additive_scores(q[:1, :1, :1], k[:1, :1, :1], w[:1])
    assert one.item() == pytest.approx(float((w[0] * torch.tanh(q[0, 0, 0] + k[0, 0, 0])).sum()), abs=1e-6)


def test_grouped_query_heads_share_keys_under_every_score():
    q, k, v, _ = _tensors(seed=3, h=4)
    k2, v2 = k[:, :2], v[:, :2]                                    # 2 key/value heads for 4 query heads
    w = torch.randn(4, 5, generator=torch.Generator().manual_seed(4))
    for scale, additive in ((1.0, None), (None, w)):
        grouped = attend(q, k2, v2, kernel="explicit", scale=scale, additive=additive)
        repeated = attend(q, k2.repeat_interleave(2, 1), v2.repeat_interleave(2, 1), kernel="explicit",
                          scale=scale, additive=additive)
        assert torch.allclose(grouped, repeated, atol=1e-6)


def test_a_packed_batch_attends_as_the_padded_one_under_every_score():
    lengths = torch.tensor([3, 5])
    p = Packed.of(lengths)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    w = torch.randn(2, 4, generator=g)
    for scale, additive in ((1.0, None), (None, w)):
        packed = attend_packed(q, k, v, p, p, False, 0.0, False, "explicit", scale, additive)
        for sentence, (start, n) in enumerate(((0, 3), (3, 5))):
            alone = attend(q[:, :, start:start + n], k[:, :, start:start + n], v[:, :, start:start + n],
                           kernel="explicit", scale=scale, additive=additive)
            assert torch.allclose(packed[:, :, start:start + n], alone, atol=1e-6), sentence


def _model(score, **changes):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=50, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=64, p_drop=0.0,
                            attention_score=score, **changes)
    return Transformer(cfg).eval()


@pytest.mark.parametrize("score", ["unscaled", "additive"])
def test_cached_decoding_equals_the_full_pass_under_each_score(score):
    m = _model(score)
    check_cached_decoding(m)
    src = torch.randint(4, 50, (3, 7), generator=torch.Generator().manual_seed(6))
    src[1, 5:] = 0
    assert greedy(m, src, 2, 3, max_extra=5) == greedy(m, src, 2, 3, max_extra=5, use_cache=False)
    assert beam_search(m, src, 2, 3, max_extra=5, graph=True) == beam_search(m, src, 2, 3, max_extra=5, graph=False)


def test_additive_attention_adds_one_weight_vector_per_head_and_layer():
    # 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions, each 4 heads x d_k 8.
    assert count_parameters(_model("additive")) - count_parameters(_model("scaled")) == 6 * 4 * 8
    assert count_parameters(_model("unscaled")) == count_parameters(_model("scaled"))


def test_the_paper_is_the_default_and_an_unknown_score_is_one_sentence():
    assert TransformerConfig().attention_score == "scaled"
    with pytest.raises(ConfigError, match="attention_score must be one of scaled, unscaled, additive"):
        TransformerConfig(attention_score="multiplicative")


def test_every_score_costs_the_formulas_multiply_adds():
    """The additive score's w_h . tanh(q_i + k_j) is d_k multiply-adds per query and key, as q_i . k_j is: the
    analytic count (harness/probes/flops.py) stands for all three, and torch's counter agrees."""
    from harness.probes import flops
    for score in ("scaled", "unscaled", "additive"):
        cfg = TransformerConfig(vocab_size=200, d_model=32, n_heads=4, d_ff=64, n_layers=2, attention_score=score)
        assert flops.count_torch(cfg, 3, 10, 7)["step_flops"] == flops.count_analytic(cfg, 3, 10, 7)["step_flops"]
