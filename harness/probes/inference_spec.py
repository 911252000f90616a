"""What a row of studies/inference.yaml measures: a model shape (a preset with settings over it, then scaled) and
the grid of batches and source lengths it is timed on. No torch, so that the study file's checks and the report
read it without the probe (harness/probes/inference.py, which times the shapes)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.errors import suggest

DTYPES = ("float32", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")
WIDTHS = ("d_model", "d_ff")                       # scaled by `width`
DEPTHS = ("n_layers", "n_enc_layers", "n_dec_layers")   # scaled by `depth`, where set


@dataclass(frozen=True)
class InferenceSpec:
    """One shape and its grid (a row of studies/inference.yaml; base.probe -> row -> profile.probe)."""
    preset: str = "paper_base"
    model: tuple[tuple[str, object], ...] = ()     # settings over the preset: family, n_layers, d_ff, n_kv_heads, ...
    width: float = 1.0                             # d_model and d_ff times this (d_k and d_v follow d_model / h)
    depth: float = 1.0                             # layers times this
    vocab_size: int = 8000
    batches: tuple[int, ...] = (1, 8)
    src_lens: tuple[int, ...] = (16, 64, 256)
    new_tokens: int = 32                           # decoding steps timed (no early stop: every row decodes them all)
    repeats: int = 3                               # timed repeats of each point (the median is kept)
    warmup: int = 1
    threads: int = 2                               # CPU intra-op threads
    device: str = "auto"
    dtype: str = "float32"                         # the weights and the caches: float32, or bfloat16 (CUDA)
    graphs: bool = True                            # CUDA: decode with the captured step graph where a family has one

    def __post_init__(self) -> None:
        # `model` as sorted (setting, value) pairs whatever it came as: a mapping (the study file), or lists (a
        # trial carried as JSON), so that equal shapes compare and hash equal.
        model = self.model
        if isinstance(model, dict):
            model = model.items()
        if isinstance(model, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in model):
            object.__setattr__(self, "model", tuple(sorted((str(k), v) for k, v in model)))

    def validate(self) -> None:
        for name in ("batches", "src_lens"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)) or not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1
                                                                 for x in v):
                raise ValueError(f"{name} must be a non-empty list of positive integers, got {v!r}")
        for name in ("new_tokens", "repeats", "threads", "vocab_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        for name in ("width", "depth"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got "
                             f"{self.dtype!r}{suggest(self.dtype, DTYPES)}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if not isinstance(self.model, tuple):
            raise ValueError(f"model must be a mapping of model settings, got {self.model!r}")


def inference_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(InferenceSpec)]


def point_key(batch: int, src_len: int) -> str:
    """The suffix of a point's metrics: `_b{batch}_s{src_len}`."""
    return f"_b{batch}_s{src_len}"


# The metrics logged per point (each with point_key's suffix) and what each is.
POINT_METRICS = {
    "prefill_tok_s": "source tokens prefilled per second (the encoder's pass, or the decoder-only prefill)",
    "decode_tok_s": "tokens generated per second over the decoding steps, the batch together",
    "ttft_ms": "time to first token: the prefill and the first decoding step, milliseconds",
    "peak_mem_bytes": "peak memory while the point ran (CUDA: allocated; CPU: the process's resident set)",
    "kv_bytes_per_token": "the self-attention cache's bytes per token, measured from the cache's tensors",
    "kv_bytes_per_source_token": "the cache's bytes per source token (cross-attention, or the prefilled cache)",
}
