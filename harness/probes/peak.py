"""The machine's own yardstick for utilization: the rate of one large square matmul on a device, in a dtype.
Used by every training trial (harness/trial.py, for Table 2's cost column computed the paper's way) and by
`python -m harness bench`."""

from __future__ import annotations

import functools
import time

import torch


def sync(device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; a CPU needs nothing)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device) -> float:
    """Seconds that fn() takes on device, its queued work included."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def matmul_peak(device, dtype) -> float:
    """TFLOP/s of a large square matmul in this dtype, its best of 10: the machine's own yardstick for
    utilization (a best, not a median, so that a busy moment does not lower the bar). Measured once per
    process, device, dtype and thread count (a Ray worker runs trial after trial: 2 s each on one CPU core)."""
    return _matmul_peak(str(device), dtype, torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _matmul_peak(device_name: str, dtype, threads: int) -> float:
    device = torch.device(device_name)
    n = 8192 if device.type == "cuda" else 2048
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    times = [timed(lambda: a @ b, device) for _ in range(10)]
    return 2 * n ** 3 / min(times) / 1e12
