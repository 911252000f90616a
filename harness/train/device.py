"""The device a run trains on, its autocast, and the check that an output directory can be written."""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from harness.errors import UserError
from harness.system import resolve_device  # noqa: F401 - the trainer's name for it (decided in system.py)


def cpu_bf16_supported() -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX512-BF16 or AMX, through oneDNN); without them
    torch emulates bf16 and autocast only slows a run down."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def amp_dtype(device: torch.device, amp: bool, cpu_amp: bool = False) -> torch.dtype | None:
    """The autocast dtype a run on `device` computes its matmuls in (None: fp32 throughout): bf16 on CUDA with
    amp, bf16 on a CPU with cpu_amp (refused, in one sentence, where the CPU has no bf16 instructions)."""
    if device.type == "cuda" and amp:
        return torch.bfloat16
    if device.type == "cpu" and cpu_amp:
        if not cpu_bf16_supported():
            raise UserError("train.cpu_amp asks for bf16 autocast, but this CPU has no bf16 instructions "
                            "(AVX512-BF16 or AMX); set train.cpu_amp=false.")
        return torch.bfloat16
    return None


def matmul_dtype(device: torch.device, train_cfg) -> torch.dtype:
    """The dtype a run's matmuls compute in (`amp_dtype`, fp32 without autocast): the yardstick's dtype."""
    return amp_dtype(device, train_cfg.amp, train_cfg.cpu_amp) or torch.float32


def device_note(asked: str, device: torch.device, amp: bool, cpu_amp: bool = False) -> str:
    """One line saying where a run trains and in what precision, printed once at its start: which device
    `auto` chose, and whether it computes in bf16 autocast (amp on CUDA, cpu_amp on a CPU) or fp32."""
    chose = f" (device auto: {'a CUDA device' if device.type == 'cuda' else 'no CUDA device here'})" \
        if asked == "auto" else ""
    if amp_dtype(device, amp, cpu_amp) is not None:
        precision = "bf16 autocast (cpu_amp)" if device.type == "cpu" else "bf16 autocast (amp)"
    else:
        precision = "fp32 (amp applies on CUDA only; cpu_amp turns it on here)" if amp else "fp32"
    return f"training on {device}{chose}, {precision}"


def autocast_for(device: torch.device, amp: bool, cpu_amp: bool = False
                 ) -> Callable[[], contextlib.AbstractContextManager]:
    """The context a run's forward passes go under: bf16 autocast where `amp_dtype` says, else nothing."""
    dtype = amp_dtype(device, amp, cpu_amp)
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)
