"""model/fused_loss.py: the fused projection and loss against torch, alone and inside the model."""

import pytest
import torch
import torch.nn.functional as F

from model import Transformer
from tests.helpers import small


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows", [1, 4, 100])      # one row a block, blocks with a remainder, one block
def test_fused_projection_and_loss_match_torch_and_gradcheck(eps, rows):
    from model.fused_loss import LinearCrossEntropy
    from model.loss import smoothed_cross_entropy
    torch.manual_seed(1)
    h = torch.randn(9, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, 5, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 13, (9,))
    ref = F.cross_entropy(F.linear(h, w), t, reduction="sum", label_smoothing=eps)
    ref_nll = F.cross_entropy(F.linear(h, w), t, reduction="sum")
    for loss, nll in (LinearCrossEntropy.apply(h, w, t, eps, rows), smoothed_cross_entropy(F.linear(h, w), t, eps)):
        assert torch.allclose(loss, ref, atol=1e-10) and torch.allclose(nll, ref_nll, atol=1e-10)
        assert not nll.requires_grad
    fused = torch.autograd.grad(LinearCrossEntropy.apply(h, w, t, eps, rows)[0] * 0.37, (h, w))
    expected = torch.autograd.grad(ref * 0.37, (h, w))
    for got, want in zip(fused, expected):
        assert torch.allclose(got, want, atol=1e-10)
    assert torch.autograd.gradcheck(lambda a, b: LinearCrossEntropy.apply(a, b, t, eps, rows)[0], (h, w))
    with torch.no_grad():                                   # evaluation: the same loss, no gradient work
        assert torch.allclose(LinearCrossEntropy.apply(h, w, t, eps, rows)[0], ref, atol=1e-10)


def test_model_loss_is_the_same_on_the_fused_and_plain_paths_under_autocast_too():
    torch.manual_seed(0)
    weights = Transformer(small(p_drop=0.0)).state_dict()
    src, tgt = torch.randint(4, 40, (3, 6)), torch.randint(4, 40, (3, 8))
    tgt[0, 5:] = 0
    models = {path: Transformer(small(p_drop=0.0), loss_impl=path) for path in ("fused", "plain")}
    for model in models.values():
        model.load_state_dict(weights)
    results = {}
    for amp in (False, True):
        for path, model in models.items():
            model.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss, nll, n = model.loss(src, tgt[:, :-1], tgt[:, 1:], label_smoothing=0.1)
            loss.backward()
            results[amp, path] = (loss.detach(), nll, [p.grad.clone() for p in model.parameters()])
    for amp, tol in ((False, 1e-5), (True, 2e-2)):
        (l1, n1, g1), (l2, n2, g2) = results[amp, "fused"], results[amp, "plain"]
        assert torch.allclose(l1, l2, rtol=tol) and torch.allclose(n1, n2, rtol=tol)
        assert all(torch.allclose(a, b, atol=tol * max(1.0, b.abs().max().item())) for a, b in zip(g1, g2))
