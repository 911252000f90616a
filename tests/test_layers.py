"""model/layers.py: the CPU dropout, and what positions do (none: permutation-equivariant)."""

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


def test_without_positions_the_encoder_is_permutation_equivariant_and_with_sinusoids_it_is_not():
    """§3.5: the model "contains no recurrence and no convolution", so positions must be injected. Without them
    (positional=none) permuting the source's tokens permutes the encoder's outputs the same way (float64, to
    1e-6); with the paper's sinusoids it does not."""
    from model import build_model
    from tests.helpers import small
    torch.manual_seed(0)
    src = torch.randint(4, 40, (2, 9))
    perm = torch.randperm(9)
    for positional, equivariant in (("none", True), ("sinusoid", False)):
        model = build_model(small(positional=positional)).double().eval()
        out, _ = model.encode(src)
        out_perm, _ = model.encode(src[:, perm])
        gap = (out_perm - out[:, perm]).abs().max().item()
        assert (gap < 1e-6) == equivariant, (positional, gap)


def test_rope_position_interpolation_turns_position_p_as_p_over_the_scale():
    """rope_scale F (Chen et al. 2023): the rotation at position F p is plain RoPE's at p; F = 1 is plain RoPE;
    a scale without RoPE, or below 1, is refused."""
    import pytest

    from model.config import ConfigError
    from model.layers import Rotary
    from tests.helpers import small
    plain, scaled = Rotary(small(positional="rope")), Rotary(small(positional="rope", rope_scale=2.0))
    x = torch.randn(1, 2, 1, 8)
    for p in (0, 1, 5, 20):
        torch.testing.assert_close(scaled(x, offset=2 * p), plain(x, offset=p))
    assert not torch.allclose(scaled(x, offset=3), plain(x, offset=3))
    with pytest.raises(ConfigError, match="needs positional=rope"):
        small(rope_scale=2.0)
    with pytest.raises(ConfigError, match="rope_scale must be a number >= 1"):
        small(positional="rope", rope_scale=0.5)


def test_a_rotary_layer_rescaled_in_place_is_one_built_with_the_scale():
    from model.layers import Rotary
    from tests.helpers import small
    built, rescaled = Rotary(small(positional="rope", rope_scale=3.0)), Rotary(small(positional="rope"))
    rescaled.set_scale(3.0)
    torch.testing.assert_close(rescaled.cos, built.cos)
    torch.testing.assert_close(rescaled.sin, built.sin)
