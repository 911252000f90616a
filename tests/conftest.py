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


# The fast tier (`pytest -m "not slow"`) stays fast: a test that is not marked slow and takes more than this (its
# set-up, call and tear-down together) is named at the end of the run, to be made cheaper or marked slow. A warning
# only: the time depends on the machine and on what else runs.
FAST_TEST_SECONDS = 2.0
_durations: dict[str, float] = {}
_unmarked: set[str] = set()


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration
    if "slow" not in report.keywords:
        _unmarked.add(report.nodeid)


def pytest_terminal_summary(terminalreporter):
    over = sorted(((s, n) for n, s in _durations.items() if n in _unmarked and s > FAST_TEST_SECONDS), reverse=True)
    if over:
        terminalreporter.write_sep("=", f"{len(over)} tests not marked slow took over {FAST_TEST_SECONDS:g} s")
        for seconds, nodeid in over:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
