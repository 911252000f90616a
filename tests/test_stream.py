"""The BatchStream alone: a state_dict round trip gives the same next batches as the uninterrupted
stream, with and without the prefetch thread, across an epoch boundary."""

import dataclasses

import pytest
import torch

from harness.data.corpus import DataConfig, load_dataset
from harness.train import BatchStream, TrainConfig
from harness.train.dist import Ranks

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


def _pairs(batch) -> list[tuple]:
    """The (source, target) pairs of a padded batch, padding stripped (EOS/BOS filler rows dropped)."""
    out = []
    for s, t in zip(batch.src.tolist(), batch.tgt_out.tolist()):
        s, t = [x for x in s if x], [x for x in t if x]
        if t:
            out.append((tuple(s), tuple(t)))
    return out


@pytest.mark.parametrize("batch_tokens, prefetch", [(800, 0), (800, 2), (400, 0), (1200, 0)])
def test_the_ranks_shares_of_each_update_are_the_single_streams_update(data, batch_tokens, prefetch):
    """Two ranks, one update at a time: the union of their micro-batches holds exactly the pairs one process
    reads in that update, none twice; with accum a multiple of world each rank gets whole micro-batches,
    otherwise (accum 1 or 3 of 2 ranks) each micro-batch's rows are split. Across an epoch boundary."""
    cfg = dataclasses.replace(CFG, batch_tokens=batch_tokens, prefetch=prefetch)
    cpu = torch.device("cpu")
    single = BatchStream(data, cfg, cpu)
    ranks = [BatchStream(data, cfg, cpu, ranks=Ranks(rank=r, world=2)) for r in (0, 1)]
    n_updates = len(single.batches) // single.accum + 2
    with single, ranks[0], ranks[1]:
        for _ in range(n_updates):
            want = sorted(p for b in single.next_update() for p in _pairs(b))
            shares = [r.next_update() for r in ranks]
            got = sorted(p for share in shares for b in share for p in _pairs(b) if b.n_tgt_tokens)
            assert got == want
            assert all(share for share in shares)           # every rank has work (or a weighted-0 stand-in)
            if single.accum % 2 == 0:
                assert [len(share) for share in shares] == [single.accum // 2] * 2
            assert sum(b.n_tgt_tokens for share in shares for b in share) == \
                sum(len(t) for _, t in want)
    assert ranks[0].state_dict() == ranks[1].state_dict() == single.state_dict()


def test_a_rank_whose_share_is_empty_gets_a_zero_weighted_stand_in(data):
    """A micro-batch of one pair split over two ranks: rank 1 gets that pair with token counts 0, so that
    it still runs forward and backward (DDP's all-reduce needs every rank) and adds nothing."""
    cfg = dataclasses.replace(CFG, batch_tokens=400)
    stream = BatchStream(data, cfg, torch.device("cpu"), ranks=Ranks(rank=1, world=2))
    stream.batches = [stream.batches[0][:1]]
    stream.load_state_dict({"epoch": 0, "position": 0})
    (b,) = stream.next_update()
    assert b.n_tgt_tokens == 0 and b.src.shape[0] == 1
