"""Cached decoding as the replay of one captured CUDA graph per step.

On a GPU a cached step is small work in many small kernels, so launching them costs more than running them.
`StepGraph` captures `Transformer.decode_step` once and replays it; for that the step must have the same
shapes at every position, which `StaticKVCache` gives it.
"""

from __future__ import annotations

import warnings

import torch

from .attention import KVCache
from .transformer import Transformer


class StaticKVCache(KVCache):
    """A self-attention cache written at a position held in a 0-d device tensor and attended whole, masked
    past that position: the same shapes at every step, as a captured graph needs."""

    def write(self, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, offset.view(1), k.to(self.k.dtype))     # autocast: bf16 k, fp32 cache
        self.v.index_copy_(2, offset.view(1), v.to(self.v.dtype))
        return self.k, self.v, (torch.arange(self.k.size(2), device=self.k.device) <= offset).view(1, 1, 1, -1)


class StepGraph:
    """`Transformer.decode_step` with fixed shapes, captured once as a CUDA graph and replayed per step.

    Its inputs live in static buffers: the previous tokens, and the position as a 0-d device tensor, so
    that the graph is the same at every step (the self-attention caches become `StaticKVCache`s over the
    same buffers). Beam search reorders `self.cache` in place between replays. On a CPU, or if capture fails
    (then with a warning), the same static step runs eagerly: the tests check it there against the ordinary
    cached step."""

    def __init__(self, model: Transformer, memory: torch.Tensor, mask: torch.Tensor | None,
                 cache: list[tuple[KVCache, KVCache]], capture: bool = True):
        self.model, self.memory, self.mask = model, memory, mask
        self.cache = [(StaticKVCache(own.k, own.v), cross) for own, cross in cache]
        device = memory.device
        self.tokens = torch.zeros(memory.size(0), dtype=torch.long, device=device)
        self.offset = torch.zeros((), dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits = self._run()                # fills the cross-attention caches, which the graph then reads
        if capture and device.type == "cuda":
            self._capture()

    def _run(self) -> torch.Tensor:
        return self.model.decode_step(self.tokens, self.memory, self.mask, self.cache, self.offset,
                                      positions=self.offset.view(1))

    def _capture(self) -> None:
        # Autocast must not cache its casts across a capture (they would be freed under the graph): each
        # replay casts again, inside the graph.
        autocast = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"),
                                  enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False)
        try:
            side = torch.cuda.Stream(self.memory.device)
            side.wait_stream(torch.cuda.current_stream(self.memory.device))
            with torch.cuda.stream(side), autocast:                       # warm-up off the capturing stream
                for _ in range(2):
                    self._run()
            torch.cuda.current_stream(self.memory.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the trainer's prefetch thread may pin host memory meanwhile, which is no error.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"), autocast:
                logits = self._run()
        except RuntimeError as err:                                       # eager steps still give the answer
            warnings.warn(f"decoding without CUDA graphs: capture failed ({err})", stacklevel=3)
            return
        self.graph, self.logits = graph, logits

    def __call__(self, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """Logits (rows, vocab) after tokens (rows,) at position `step`; valid until the next call."""
        self.tokens.copy_(tokens)
        self.offset.fill_(step)
        for self_cache, _ in self.cache:
            self_cache.length = step + 1                                  # what beam search reorders
        if self.graph is None:
            return self._run()
        self.graph.replay()
        return self.logits
