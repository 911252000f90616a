"""model/layers.py: the CPU dropout."""

import torch


def test_cpu_dropout_drops_p_of_the_units_rescales_the_rest_and_masks_the_gradient_alike():
    from model.layers import dropout
    torch.manual_seed(0)
    x = torch.ones(400, 500, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.3) < 0.005
    assert torch.all((y == 0) | torch.isclose(y, torch.tensor(1 / 0.7)))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())                  # d(x * m / (1 - p)) / dx = m / (1 - p)
    assert torch.equal(dropout(x, 0.3, training=False), x)
