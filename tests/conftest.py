import pytest
import torch

from harness.data.corpus import DataConfig, load_dataset


@pytest.fixture(scope="module")
def data_cfg(tmp_path_factory):
    """A small made-up corpus (300 training pairs) for the trainer's tests (test_train.py, test_patience.py)."""
    return DataConfig(train_pairs=300, dev_pairs=16, test_pairs=16, seed=5,
                      cache_dir=str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def dataset(data_cfg):
    """data_cfg's corpus with a 300-piece BPE, sentences up to 256 tokens (their MODEL's vocab_size, max_len)."""
    return load_dataset(data_cfg, 300, 256)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
