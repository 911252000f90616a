"""model/kernels.py: each kernel's arithmetic, the "auto" rule and the variable-length adapter."""

import pytest
import torch
import torch.nn.functional as F

from model import Transformer, reference_attention
from model.kernels import CPU_EXPLICIT_MAX_KEYS, Kernels, ShortSoftmax, attend
from tests.helpers import small


@pytest.mark.parametrize("path", ["sdpa", "explicit"])
def test_attention_dropout_keeps_the_expectation_on_both_paths(path):
    # Uniform weights over S keys and v = 1: each output is (kept weights) / (1 - p), 1 in expectation.
    torch.manual_seed(0)
    q = torch.zeros(64, 2, 8, 4)
    kv = torch.ones(64, 2, 32, 4)
    out = attend(q, kv, kv, None, False, 0.5, kernel=path)
    assert out.std() > 0.1                                  # weights were dropped
    assert abs(out.mean().item() - 1.0) < 0.02              # and the kept ones rescaled


def test_short_softmax_equals_torch_softmax_forward_and_backward_with_masked_keys():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 5, 7, dtype=torch.float64)
    x[..., 4:] = float("-inf")                              # masked keys, as the explicit path adds them
    x.requires_grad_(True)
    y = ShortSoftmax.apply(x)
    ref = x.detach().clone().requires_grad_(True)
    y_ref = ref.softmax(-1)
    assert torch.allclose(y, y_ref, atol=1e-12) and torch.all(y[..., 4:] == 0)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    assert torch.allclose(x.grad, ref.grad, atol=1e-12)
    assert torch.autograd.gradcheck(ShortSoftmax.apply,
                                    (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True),))
    half = torch.randn(4, 9, dtype=torch.bfloat16)         # low precision: computed in fp32, returned as given
    out = ShortSoftmax.apply(half)
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), half.float().softmax(-1), atol=4e-3)


def test_a_model_chooses_its_kernels_once_from_its_device_and_short_rows_dispatch_by_shape(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    q = torch.randn(1, 2, 3, 4)
    attend(q, torch.randn(1, 2, CPU_EXPLICIT_MAX_KEYS, 4), torch.randn(1, 2, CPU_EXPLICIT_MAX_KEYS, 4), None, False,
           0.0, kernel="short_rows")
    assert calls == []
    attend(q, torch.randn(1, 2, CPU_EXPLICIT_MAX_KEYS + 1, 4), torch.randn(1, 2, CPU_EXPLICIT_MAX_KEYS + 1, 4), None,
           False, 0.0, kernel="short_rows")
    assert calls == [1]
    # "auto" is decided by the device, when the model is built and when it moves; the layers share the choice
    model = Transformer(small())
    assert model.kernels.dense == "short_rows" and not model.kernels.varlen
    assert all(m.kernels is model.kernels for m in model.modules() if hasattr(m, "kernels"))
    assert (Kernels.choose("auto", "cuda").dense, Kernels.choose("auto", "meta").dense) == ("sdpa", "sdpa")
    assert Kernels.choose("explicit", "cuda").dense == "explicit" and not Kernels.choose("explicit", "cuda").varlen
    with torch.device("meta"):
        assert Transformer(small()).kernels.dense == "sdpa"
    model.to("meta")
    assert model.kernels.dense == "sdpa"
    with pytest.raises(ValueError, match="attention kernel"):
        Transformer(small(), kernel="flash")
    with pytest.raises(ValueError, match="attention kernel"):
        attend(q, q, q, kernel="flash")
    with pytest.raises(ValueError, match="chosen when a model is built"):
        attend(q, q, q, kernel="auto")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_varlen_kernel_agrees_with_the_padded_layout_on_cuda():
    from model.kernels import Packed, attend_packed
    torch.manual_seed(0)
    lens = torch.tensor([5, 17, 1, 30], device="cuda")
    p = Packed.of(lens)
    q, k, v = (torch.randn(1, 4, int(lens.sum()), 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        fast = attend_packed(q, k, v, p, p, causal, 0.0, False, Kernels.choose("auto", "cuda"))
        slow = attend_packed(q, k, v, p, p, causal, 0.0, False, kernel="explicit")   # the padded layout
        assert torch.allclose(fast.float(), slow.float(), atol=2e-2)


@pytest.mark.parametrize("api", ["torch 2.10: is_causal", "later: window_size, enable_gqa"])
def test_the_varlen_adapter_speaks_each_version_of_the_kernel(monkeypatch, api):
    """`_varlen` passes causality and grouped K/V heads the way the installed varlen_attn takes them; here a
    written-out stand-in for the CUDA kernel, with either signature, against the padded layout."""
    from model import kernels
    from model.kernels import Packed, _varlen, attend_packed

    def fake_varlen(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs):        # (N, h, d) layouts, as the kernel
        causal = (kwargs.pop("is_causal", False) if api.startswith("torch 2.10")
                  else kwargs.pop("window_size") == (-1, 0))
        assert kwargs.pop("enable_gqa", False) == (k.size(1) != q.size(1)) and not kwargs
        outs = []
        for i in range(len(cu_q) - 1):
            qi, ki, vi = (x[int(c[i]):int(c[i + 1])].transpose(0, 1) for x, c in ((q, cu_q), (k, cu_k), (v, cu_k)))
            ki, vi = (x.repeat_interleave(qi.size(0) // x.size(0), dim=0) for x in (ki, vi))
            outs.append(reference_attention(qi, ki, vi, causal=causal).transpose(0, 1))
        return torch.cat(outs)

    monkeypatch.setattr(kernels, "varlen_attn", fake_varlen)
    monkeypatch.setattr(kernels, "_VARLEN_ARGS", {"is_causal"} if api.startswith("torch 2.10")
                        else {"window_size", "enable_gqa"})
    torch.manual_seed(0)
    lens = torch.tensor([5, 9, 1, 7])
    p = Packed.of(lens)
    for h_kv in (4, 2):
        q = torch.randn(1, 4, int(lens.sum()), 8)
        k, v = torch.randn(1, h_kv, int(lens.sum()), 8), torch.randn(1, h_kv, int(lens.sum()), 8)
        for causal in (False, True):
            fast = _varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), p, p, causal,
                           h_kv != 4).transpose(0, 1)[None]
            slow = attend_packed(q, k, v, p, p, causal, 0.0, h_kv != 4)   # CPU: the padded layout
            assert torch.allclose(fast, slow, atol=1e-5)
