"""A data-parallel trial: the Ray Tune trial is the driver of a Ray Train run (Train V2: TorchTrainer built
and fitted inside the Tune function trainable), whose N workers each run harness/trial.py's run_trial as
one rank. Ray Train starts the workers and the process group (gloo on CPU, nccl on GPU); the trial's
rank 0 writes the checkpoints, the metrics and the one MLflow child run, and leaves its result in
result.json, which the driver reports to Tune.

A worker that dies is restarted with the whole group (FailureConfig(max_failures)), and every rank
resumes from the trial's own last checkpoint in its run directory (harness/train/checkpoint.py), not
from a Ray Train checkpoint: a Tune retry and a `--resume` after a driver kill find the same files. On
several nodes that directory, like Ray's storage path, must be on storage every node sees."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.io import atomic_write

RESULT = "result.json"
DRIVER_CPU = 0.1      # the Tune trial's own bundle: it only waits for the workers ({"cpu": 0} is refused)


def with_node(ctx: dict) -> dict:
    """ctx with the Ray node this process runs on as a tag of the trial's child run (`ray_node`)."""
    import ray
    return {**ctx, "tags": {**ctx["tags"], "ray_node": ray.get_runtime_context().get_node_id()}}


def trainable(config: dict) -> None:
    """The Tune function trainable of a data-parallel study: fit the Train run, report rank 0's result."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer

    from harness.trial import spec_key
    spec, ctx = config["trial"], config["ctx"]
    dp = ctx["data_parallel"]
    out_dir = Path(ctx["run_dir"]) / spec_key(spec)
    (out_dir / RESULT).unlink(missing_ok=True)
    use_gpu = dp["gpu"] > 0
    per_worker = {"CPU": dp["cpu"], **({"GPU": dp["gpu"]} if use_gpu else {})}
    trainer = TorchTrainer(
        _worker, train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=dp["workers"], use_gpu=use_gpu,
                                               resources_per_worker=per_worker),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        # A name fixed per trial: a Tune retry of the trial finds the same Train run directory.
        run_config=ray.train.RunConfig(name=f"train-{out_dir.name}", storage_path=str(Path(ctx["run_dir"]) / "train"),
                                       failure_config=ray.train.FailureConfig(max_failures=dp["max_failures"])))
    trainer.fit()
    tune.report(json.loads((out_dir / RESULT).read_text()))


def _worker(config: dict) -> None:
    """One rank: run the trial; rank 0 leaves the trial's result for the driver."""
    import ray.train
    import ray.train.torch

    from harness.study.kinds import KINDS
    from harness.train.dist import Ranks
    from harness.trial import run_trial, spec_key

    context = ray.train.get_context()
    device = ray.train.torch.get_device() if config["ctx"]["data_parallel"]["gpu"] > 0 else "cpu"
    ranks = Ranks.from_process_group(local_rank=context.get_local_rank(), device=str(device))
    os.environ.setdefault("OMP_NUM_THREADS", str(config["ctx"]["threads"]))
    result = run_trial(
        config["trial"], with_node(config["ctx"]), KINDS[config["trial"]["kind"]], ranks
    )  # rank 0's node is the trial's
    if ranks.is_main:
        out_dir = Path(config["ctx"]["run_dir"]) / spec_key(config["trial"])
        atomic_write(out_dir / RESULT, json.dumps({**result, "workers": ranks.world, "backend": ranks.backend}))
