"""The Checkpointer alone: a save/restore round trip restores model, optimizer, RNG, step and stream
position; pruning keeps the newest; averaging is the element-wise mean; another config is refused."""

import pytest
import torch

from harness.errors import UserError
from harness.train import Checkpointer, list_checkpoints
from harness.train.dist import Ranks


def _model_and_opt(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    return model, opt


def _step(model, opt):
    opt.zero_grad()
    torch.nn.functional.dropout(model(torch.randn(8, 4)), 0.5).sum().backward()
    opt.step()


class _Stream:
    def __init__(self):
        self.state = None

    def load_state_dict(self, state):
        self.state = state


def test_save_restore_round_trip_restores_model_optimizer_rng_and_step(tmp_path):
    cpu = torch.device("cpu")
    model, opt = _model_and_opt()
    for _ in range(3):
        _step(model, opt)
    ckpt = Checkpointer(tmp_path, {"a": 1}, cpu)
    ckpt.save(3, model, opt, {"epoch": 1, "position": 7}, {"train_seconds": 2.5, "tokens_seen": 99})
    _step(model, opt)                       # the uninterrupted run goes on
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    fresh, fresh_opt = _model_and_opt(seed=1)
    stream = _Stream()
    step, clock = Checkpointer(tmp_path, {"a": 1}, cpu).restore(fresh, fresh_opt, stream)
    # a checkpoint written without the loop's wall and CPU clocks reads them as its train_seconds and 0
    assert step == 3 and clock == {"train_seconds": 2.5, "tokens_seen": 99, "wall_seconds": 2.5, "cpu_seconds": 0.0}
    assert stream.state == {"epoch": 1, "position": 7}
    _step(fresh, fresh_opt)                 # same RNG draws, same Adam moments: the same update
    assert all(torch.equal(fresh.state_dict()[k], expected[k]) for k in expected)


def test_restore_without_checkpoint_starts_at_zero_and_another_config_is_refused(tmp_path):
    model, opt = _model_and_opt()
    assert Checkpointer(tmp_path, {}, torch.device("cpu")).restore(model, opt)[0] == 0
    Checkpointer(tmp_path, {"a": 1}, torch.device("cpu")).save(1, model, opt, {"epoch": 0, "position": 1},
                                                                {"train_seconds": 0.0, "tokens_seen": 0})
    with pytest.raises(UserError, match="another config"):
        Checkpointer(tmp_path, {"a": 2}, torch.device("cpu")).restore(model, opt)


def test_prune_keeps_the_newest_and_average_is_the_mean(tmp_path):
    model, opt = _model_and_opt()
    ckpt = Checkpointer(tmp_path, {}, torch.device("cpu"), keep=2)
    weights = []
    for step in (1, 2, 3):
        _step(model, opt)
        weights.append(model.weight.detach().clone())
        ckpt.save(step, model, opt, {"epoch": 0, "position": step}, {"train_seconds": 0.0, "tokens_seen": 0})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000002.pt", "step_00000003.pt"]
    avg, n = ckpt.average(2)
    assert n == 2
    torch.testing.assert_close(avg["weight"], (weights[1] + weights[2]) / 2)


def test_maybe_save_every_n_steps_and_only_on_the_main_rank(tmp_path):
    model, opt = _model_and_opt()
    state, clock = {"epoch": 0, "position": 0}, {"train_seconds": 0.0, "tokens_seen": 0}
    ckpt = Checkpointer(tmp_path / "main", {}, torch.device("cpu"), every=2)
    # A rank other than 0 (world 1 here, so that no process group is needed for the RNG gather).
    other = Checkpointer(tmp_path / "other", {}, torch.device("cpu"), every=2, ranks=Ranks(rank=1, world=1))
    for step in (1, 2, 3, 4):
        ckpt.maybe_save(step, model, opt, state, clock)
        other.maybe_save(step, model, opt, state, clock)
    assert [p.name for p in list_checkpoints(tmp_path / "main")] == ["step_00000002.pt", "step_00000004.pt"]
    assert not list_checkpoints(tmp_path / "other")
