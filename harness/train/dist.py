"""Data-parallel training's ranks: who this process is among the trial's workers, and the few collectives
the loop needs (sum the step's loss and token counts, agree on a checkpoint, gather each rank's RNG).

One process (the default, `SINGLE`) does no communication at all, so a one-worker trial runs exactly the
code it ran before data parallelism existed. With N workers (Ray Train's TorchTrainer starts them and the
process group, harness/study/parallel.py) every rank holds the whole model, reads its share of each update
(harness/train/stream.py), and DDP averages the gradients; rank 0 alone writes checkpoints, metrics and
MLflow, and runs the final evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = ""          # the device this rank trains on ("" resolves train.device as one process does)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def backend(self) -> str:
        """gloo (CPU) or nccl (GPU) once the process group is up; "" for one process."""
        return dist.get_backend() if self.world > 1 and dist.is_initialized() else ""

    @classmethod
    def from_process_group(cls, local_rank: int = 0, device: str = "") -> "Ranks":
        """This process's place in the initialised default process group (one process if there is none)."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls(device=device)
        return cls(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, device=device)

    def sum(self, *values: float | int | torch.Tensor, device: torch.device | None = None) -> list[float]:
        """The sums of `values` over every rank (floats, in float64, so token counts stay exact)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._comm_device(device))
        dist.all_reduce(t)
        return t.tolist()

    def agree(self, flag: bool, device: torch.device | None = None) -> bool:
        """Rank 0's decision, on every rank (a time-based checkpoint is decided by rank 0's clock)."""
        if self.world == 1:
            return flag
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self._comm_device(device))
        dist.broadcast(t, src=0)
        return bool(t.item())

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank (pickled: for small states such as the RNG)."""
        if self.world == 1:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def _comm_device(self, device: torch.device | None) -> torch.device:
        # nccl moves CUDA tensors only; gloo CPU tensors.
        return device if device is not None and self.backend == "nccl" else torch.device("cpu")


SINGLE = Ranks()
