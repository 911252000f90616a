"""model/attention.py: MultiHeadAttention (Eq. 2) on each kernel against Eq. 1 written out."""

import pytest
import torch

from model import Transformer, TransformerConfig, reference_attention


@pytest.mark.parametrize("path", ["sdpa", "explicit"])
@pytest.mark.parametrize("d_k, d_v, n_kv, causal, masked", [
    (16, 16, 4, False, True), (8, 24, 4, False, True), (16, 16, 2, True, False), (16, 16, 1, False, True),
    (16, 16, 2, True, True)])
def test_both_attention_paths_equal_handwritten_softmax_attention(d_k, d_v, n_kv, causal, masked, path):
    cfg = TransformerConfig(vocab_size=50, d_model=64, n_heads=4, d_k=d_k, d_v=d_v, n_kv_heads=n_kv, p_drop=0.0)
    mha = Transformer(cfg, kernel=path).encoder.layers[0].self_attn.sublayer.eval()
    x = torch.randn(2, 7, 64)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :] if masked else None
    with torch.no_grad():
        out = mha(x, mask=mask, causal=causal)
        q, k, v = mha.qkv_proj(x).split(mha.splits, dim=-1)
        q, k, v = mha._heads(q, 4), mha._heads(k, n_kv), mha._heads(v, n_kv)
        k, v = k.repeat_interleave(4 // n_kv, dim=1), v.repeat_interleave(4 // n_kv, dim=1)
        manual = reference_attention(q, k, v, mask=mask, causal=causal)
        manual = mha.out_proj(manual.transpose(1, 2).reshape(2, 7, 4 * d_v))
    assert torch.allclose(out, manual, atol=1e-5)
