"""Token-budget batching and the shared BPE model."""

import numpy as np
import pytest

from harness.data.batching import (
    LENGTH_BUCKETS,
    ParallelData,
    Prefetcher,
    bucket_batches,
    bucket_length,
    epoch_order,
    packed_batches,
    padding_fraction,
    token_batches,
)
from harness.data.bpe import BOS, EOS, PAD, Tokenizer, train_bpe
from harness.data.synth import generate
from harness.errors import UserError


def test_batches_respect_the_token_budget_and_cover_every_pair_once():
    rng = np.random.default_rng(0)
    src = rng.integers(3, 80, 5000)
    tgt = np.clip(src + rng.integers(-5, 6, 5000), 2, None)
    batches = token_batches(src, tgt, 2000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(5000))
    for b in batches:
        assert len(b) == 1 or len(b) * max(src[b].max(), tgt[b].max()) <= 2000
    # Sorted by length, batches are nearly rectangular: little padding (random batches pad ~40 %); what
    # remains comes from source and target lengths differing independently by up to 5 tokens here.
    assert padding_fraction(batches, src, tgt) < 0.08
    shuffled = [np.arange(i, min(i + 40, 5000)) for i in range(0, 5000, 40)]
    assert padding_fraction(shuffled, src, tgt) > 0.3


def test_a_pair_longer_than_the_budget_gets_a_batch_of_its_own():
    batches = token_batches(np.array([5, 500, 6]), np.array([5, 400, 6]), 100)
    assert [len(b) for b in batches] == [2, 1]


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    assert (epoch_order(50, 3, 7) == epoch_order(50, 3, 7)).all()
    assert not (epoch_order(50, 3, 7) == epoch_order(50, 3, 8)).all()
    assert sorted(epoch_order(50, 3, 7).tolist()) == list(range(50))


def test_collate_adds_bos_and_eos_and_pads_right():
    data = ParallelData([[10, 11], [12]], [[20], [21, 22, 23]])
    b = data.collate(np.array([0, 1]))
    assert b.src.tolist() == [[10, 11, EOS], [12, EOS, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 20, PAD, PAD], [BOS, 21, 22, 23]]
    assert b.tgt_out.tolist() == [[20, EOS, PAD, PAD], [21, 22, 23, EOS]]
    assert b.n_tgt_tokens == 2 + 4


def test_parallel_data_drops_pairs_longer_than_the_position_table():
    data = ParallelData([[1] * 5, [1] * 50], [[1] * 5, [1] * 5], max_len=20)
    assert len(data) == 1


def test_dev_data_longer_than_the_position_table_is_cut_not_dropped():
    data = ParallelData([[1] * 5, [1] * 50], [[1] * 5, [1] * 30], max_len=20, truncate=True)
    assert len(data) == 2 and data.truncated == 1
    assert data.src_lens.tolist() == [6, 20] and data.tgt_lens.tolist() == [6, 20]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    src, tgt = root / "train.src", root / "train.tgt"
    pairs = list(generate(400, seed=3))
    src.write_text("".join(p.src + "\n" for p in pairs), encoding="utf-8")
    tgt.write_text("".join(p.tgt + "\n" for p in pairs), encoding="utf-8")
    return root, src, tgt, pairs


def test_shared_bpe_round_trips_both_languages_and_is_cached(corpus):
    root, src, tgt, pairs = corpus
    path = train_bpe([src, tgt], 500, root / "cache")
    tok = Tokenizer(path)
    assert tok.vocab_size <= 500
    ids = tok.encode([pairs[0].src, pairs[0].tgt])
    assert tok.decode(ids) == [pairs[0].src, pairs[0].tgt]
    assert min(min(x) for x in ids) > EOS          # specials are never produced from text
    mtime = path.stat().st_mtime_ns
    assert train_bpe([src, tgt], 500, root / "cache") == path and path.stat().st_mtime_ns == mtime
    assert train_bpe([src, tgt], 400, root / "cache") != path      # another size, another model


def test_bpe_refuses_missing_files(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        train_bpe([tmp_path / "nope.src"], 100, tmp_path)


def test_collate_to_a_larger_shape_adds_filler_rows_that_carry_no_targets():
    data = ParallelData([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    b = data.collate(np.array([0, 1]), shape=(4, 6, 5))
    assert b.src.shape == (4, 6) and b.tgt_in.shape == (4, 5) and b.tgt_out.shape == (4, 5)
    assert b.src[0].tolist() == [5, 6, 7, EOS, PAD, PAD] and b.tgt_out[1].tolist() == [11, 12, 13, EOS, PAD]
    assert b.src[2:].tolist() == [[EOS] + [PAD] * 5] * 2            # a source token: no all-masked row
    assert b.tgt_in[2:, 0].tolist() == [BOS, BOS] and (b.tgt_out[2:] == PAD).all()
    assert b.n_tgt_tokens == 3 + 4 and b.n_src_tokens == 4 + 2


def test_bucketed_batches_cover_every_pair_once_in_few_shapes_within_the_budget():
    rng = np.random.default_rng(0)
    src_lens, tgt_lens = rng.integers(2, 120, 3000), rng.integers(2, 120, 3000)
    batches, shapes = bucket_batches(src_lens, tgt_lens, 2000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(3000))
    assert len(set(shapes)) <= len([b for b in LENGTH_BUCKETS if b <= 128])
    for b, (rows, s, t) in zip(batches, shapes):
        assert s == t == bucket_length(int(max(src_lens[b].max(), tgt_lens[b].max())))
        assert len(b) <= rows and rows * s <= 2000
    exact = padding_fraction(token_batches(src_lens, tgt_lens, 2000), src_lens, tgt_lens)
    bucketed = padding_fraction(batches, src_lens, tgt_lens, shapes)
    assert exact < bucketed < 0.6                                    # the price of static shapes, measured


def test_prefetcher_keeps_the_order_and_raises_the_producers_error_in_turn():
    items = iter([1, 2, 3])
    feed = Prefetcher(lambda: next(items), depth=2)
    assert [feed.get(), feed.get(), feed.get()] == [1, 2, 3]
    with pytest.raises(StopIteration):
        feed.get()
    feed.close()
    endless = Prefetcher(lambda: 0, depth=1)
    endless.close()
    assert not endless._thread.is_alive()


def test_packed_batches_count_real_tokens_and_a_packed_batch_has_no_padding():
    rng = np.random.default_rng(1)
    src_lens, tgt_lens = rng.integers(2, 60, 500), rng.integers(2, 60, 500)
    batches = packed_batches(src_lens, tgt_lens, 1000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    assert all(src_lens[b].sum() <= 1000 and tgt_lens[b].sum() <= 1000 for b in batches)
    assert len(batches) < len(token_batches(src_lens, tgt_lens, 1000))   # no padding: fuller batches
    data = ParallelData([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    b = data.collate_packed(np.array([1, 0]))
    assert b.src.tolist() == [[8, EOS, 5, 6, 7, EOS]]
    assert b.tgt_in.tolist() == [[BOS, 11, 12, 13, BOS, 9, 10]]
    assert b.tgt_out.tolist() == [[11, 12, 13, EOS, 9, 10, EOS]]
    src, tgt = b.packing
    assert src.cu.tolist() == [0, 2, 6] and tgt.pos.tolist() == [0, 1, 2, 3, 0, 1, 2] and tgt.max_len == 4
    assert b.n_tgt_tokens == 7 and b.n_src_tokens == 6


def test_the_ranks_of_one_job_may_check_and_fill_the_same_directories_at_once(tmp_path):
    """torchrun starts every rank at the same moment: each checks that the output directory is writable and
    each may build the same cached corpus. Neither may fail because another rank is doing the same."""
    import threading

    from harness.io import atomic_dir, check_writable
    errors, start = [], threading.Barrier(4)

    def rank(i: int) -> None:
        start.wait()
        try:
            for j in range(200):
                check_writable(tmp_path / "out", "output directory", "choose a writable path")
                with atomic_dir(tmp_path / f"cache-{j}") as tmp:
                    (tmp / "manifest.json").write_text(str(i))
                assert (tmp_path / f"cache-{j}" / "manifest.json").is_file()
        except Exception as err:     # noqa: BLE001 - any failure of any rank fails the test
            errors.append(err)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no probe or temp dir left
    assert list((tmp_path / "out").iterdir()) == []
