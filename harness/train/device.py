"""The device a run trains on, its autocast, and the check that an output directory can be written."""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from harness.errors import UserError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a torch device; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} asked for CUDA but this machine has no CUDA device; use cpu or auto.")
    return device


def device_note(asked: str, device: torch.device, amp: bool) -> str:
    """One line saying where a run trains and in what precision, printed once at its start: which device
    `auto` chose, and that amp (bf16 autocast) is CUDA's only, so a CPU run is fp32."""
    chose = f" (device auto: {'a CUDA device' if device.type == 'cuda' else 'no CUDA device here'})" \
        if asked == "auto" else ""
    precision = "bf16 autocast (amp)" if device.type == "cuda" and amp else \
        "fp32 (amp applies on CUDA only)" if amp else "fp32"
    return f"training on {device}{chose}, {precision}"


def autocast_for(device: torch.device, amp: bool) -> Callable[[], contextlib.AbstractContextManager]:
    if device.type == "cuda" and amp:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


