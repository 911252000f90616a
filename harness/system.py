"""What this process runs on: the host allocator, the project's checkout, the libraries and the hardware.

Host memory: keep glibc from handing large blocks back to the OS between training steps. By default glibc
serves a block above its mmap threshold (128 KiB at start, raised as blocks are freed) with fresh pages from
the OS and unmaps it on free, so every step page-faults its largest tensors (the tiny model's (tokens x
vocab) logits and their gradient: 128 MiB each) byte by byte. Measured on 2 cores, a 4000 x 8000
log_softmax takes 43 ms with fresh pages and 14 ms with reused ones. CPU only; CUDA has its own caching
allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import torch

from harness.errors import UserError

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def resolve_device(name: str) -> torch.device:
    """A device name (auto, cpu, cuda, cuda:N) as the torch device runs use: auto is CUDA where there is one.
    The one place that decides it, for training, evaluation, the bench and the probes."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a torch device; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} asked for CUDA but this machine has no CUDA device; use cpu or auto.")
    return device


def pin_allocator() -> bool:
    """glibc only: serve every allocation below 1 GiB from the heap and never trim it. Returns whether it
    took effect (False on other C libraries, which keep their own behaviour). The cost is that the process
    keeps its peak heap until it exits, which a training process reaches again at every step anyway.

    It also steadies timings: without it the same Table 1 point was measured at 13 ms in one sweep and
    45 ms in the next (restricted attention, n = 512), allocator state and not the layer's complexity."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False


PROJECT_ROOT = Path(__file__).resolve().parents[1]      # the checkout this harness/ was imported from


def git_state(root: Path = PROJECT_ROOT) -> tuple[str, bool]:
    """(commit, uncommitted changes) of the project's own checkout, whatever the current directory: a study
    started from a scratch directory, or from inside another repository, records the commit of the code that
    ran. "unknown" where the project is not a git checkout of its own (e.g. installed into site-packages,
    which may itself lie inside some other repository)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
        return done.stdout.strip()
    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root.resolve():
            return "unknown", False
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines()) if k.strip()}


def cpu_model() -> str:
    """The processor's name, and on x86 its family, model and stepping: two machines that both call themselves
    "Intel(R) Xeon(R) Processor" (as virtual machines often do) are told apart by the model number."""
    info = _cpuinfo()
    name = " ".join(info.get("model name", "").split()) or platform.processor() or "unknown CPU"
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']} model {info['model']} stepping {info.get('stepping', '?')})"
    return name


# Instruction-set extensions that change which kernels oneDNN and MKL run (and so the last digits of a result).
_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


# Environment variables that cap or pin the code those libraries dispatch to (ATen, oneDNN, MKL): where one is set,
# the CPU's extensions alone no longer say which kernels ran.
_ISA_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def cpu_isa() -> str:
    """The vector code the CPU kernels dispatch to: ATen's capability (DEFAULT, AVX2, AVX512, ...; what torch's
    own kernels pick at run time), the listed extensions the CPU has (what oneDNN and MKL pick from), and any
    environment variable that caps their choice (ONEDNN_MAX_CPU_ISA=AVX2, MKL_CBWR=COMPATIBLE, ...)."""
    flags = set(_cpuinfo().get("flags", "").split())
    have = [f for f in _ISA_FLAGS if f in flags]
    caps = [f"{k}={os.environ[k]}" for k in _ISA_CAPS if os.environ.get(k)]
    return (f"{torch.backends.cpu.get_cpu_capability()} kernels" + (f"; {' '.join(have)}" if have else "")
            + (f"; capped by {' '.join(caps)}" if caps else ""))


def hardware() -> str:
    """One line: architecture, CPU model and the instruction set its kernels use, cores, GPUs, torch. The same
    figures reproduce bit for bit only on the same CPU model, threads and versions (docs/trainer.md, "Reproducing a
    figure")."""
    gpu = f", {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return (f"{platform.machine()} {cpu_model()} [{cpu_isa()}], {os.cpu_count()} CPU cores{gpu}, "
            f"torch {torch.__version__}")


def hardware_tags() -> dict[str, str]:
    """The hardware as MLflow tags: the one-line summary and its parts, each searchable on its own."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return {"hardware": hardware(), "cpu_model": cpu_model(), "cpu_isa": cpu_isa(), "gpu": gpu,
            "torch_threads": str(torch.get_num_threads())}


# The libraries a result depends on, recorded with every run (tags version.<name>) and printed in reports.
TRACKED_PACKAGES = ("attention-harness", "torch", "ray", "mlflow", "sacrebleu", "sentencepiece", "fvcore")


def versions() -> dict[str, str]:
    """{"version.torch": "2.13.0", ...} from the installed distributions' metadata (nothing is imported);
    "not installed" where one is missing (e.g. a GPU box with only the model core's packages). The project's
    own version stands in for the commit where the code is not a git checkout (an installed wheel)."""
    out = {}
    for name in TRACKED_PACKAGES:
        try:
            out[f"version.{name}"] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[f"version.{name}"] = "not installed"
    return out



def reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux: "5" to /proc/self/clear_refs; a kernel
    control, not a file the harness writes). False where the system has none."""
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, b"5")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def peak_rss() -> int | None:
    """This process's resident-set high-water mark in bytes since start or since `reset_peak_rss` (Linux's
    VmHWM), or None where the system does not report it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            line = next((ln for ln in f if ln.startswith("VmHWM:")), None)
    except OSError:
        return None
    return int(line.split()[1]) * 1024 if line else None
