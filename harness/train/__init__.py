"""Training (§5): Adam(0.9, 0.98, 1e-9), the warmup-then-inverse-square-root schedule, label smoothing,
token-budget batches with gradient accumulation, checkpoints that resume exactly, checkpoint averaging,
bf16 autocast on CUDA. `train` (loop.py) is used by `python -m harness train` and by study trials; it
sets up the components (config, device, stream, checkpoint, log, compile, finish) and loops over them."""

from harness.train.checkpoint import (
                         CHECKPOINT_VERSION,
                         Checkpointer,
                         average_checkpoints,
                         latest_readable_checkpoint,
                         list_checkpoints,
                         load_checkpoint,
                         save_checkpoint,
)
from harness.train.compile import training_loss
from harness.train.config import COMPILE_MODES, TRAIN_PRESETS, TrainConfig, learning_rate, preset
from harness.train.device import autocast_for, resolve_device
from harness.train.finish import finish
from harness.train.log import MetricsLog, Progress
from harness.train.loop import StepHook, train, train_step
from harness.train.stream import BatchStream

__all__ = ["CHECKPOINT_VERSION", "COMPILE_MODES", "TRAIN_PRESETS", "BatchStream", "Checkpointer", "MetricsLog",
           "Progress", "StepHook", "TrainConfig", "autocast_for", "average_checkpoints",
           "finish", "latest_readable_checkpoint", "learning_rate", "list_checkpoints", "preset",
           "load_checkpoint", "resolve_device", "save_checkpoint", "train", "train_step", "training_loss"]
