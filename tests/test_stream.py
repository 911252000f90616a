"""The BatchStream alone: a state_dict round trip gives the same next batches as the uninterrupted
stream, with and without the prefetch thread, across an epoch boundary."""

import dataclasses

import pytest
import torch

from harness.data.corpus import DataConfig, load_dataset
from harness.train import BatchStream, TrainConfig

CFG = TrainConfig(max_tokens=400, batch_tokens=800, seed=3, prefetch=0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    cfg = DataConfig(train_pairs=120, dev_pairs=4, test_pairs=4, seed=2, cache_dir=str(tmp_path_factory.mktemp("d")))
    return load_dataset(cfg, 300, 128).train.data


def _take(stream, n):
    return [b.src.clone() for _ in range(n) for b in stream.next_update()]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_state_dict_round_trip_gives_the_same_next_batches(data, prefetch):
    cfg = dataclasses.replace(CFG, prefetch=prefetch)
    cpu = torch.device("cpu")
    n_updates = len(BatchStream(data, cfg, cpu).batches)      # past one epoch: two micro-batches an update
    with BatchStream(data, cfg, cpu) as whole:
        _take(whole, 3)
        state = whole.state_dict()
        expected = _take(whole, n_updates)
    resumed = BatchStream(data, cfg, cpu)
    resumed.load_state_dict(state)
    with resumed:
        got = _take(resumed, n_updates)
    assert state == {"epoch": 0, "position": 6}
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))
    assert resumed.state_dict()["epoch"] >= 1            # the round trip crossed an epoch boundary


def test_load_state_dict_after_start_is_refused(data):
    stream = BatchStream(data, dataclasses.replace(CFG, prefetch=2), torch.device("cpu")).start()
    try:
        with pytest.raises(RuntimeError, match="after start"):
            stream.load_state_dict({"epoch": 0, "position": 0})
    finally:
        stream.close()
