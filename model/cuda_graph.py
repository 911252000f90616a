"""Cached decoding as the replay of one captured CUDA graph per step.

On a GPU a cached step is small work in many small kernels, so launching them costs more than running them.
`StepGraph` captures a family's `decode_step` once and replays it; for that the step must have the same
shapes at every position, which `StaticKVCache` (model/attention.py) gives it. A family whose step can be
captured says so (`capturable = True`) and gives two hooks: `static_cache(cache)`, its cache with every
self-attention buffer a `StaticKVCache`, and `mark_written(cache, step)`, what beam search's reorder then
moves (the Transformer and the decoder-only family have them).
"""

from __future__ import annotations

import warnings

import torch

from .family import Seq2SeqModel


class StepGraph:
    """A family's `decode_step` with fixed shapes, captured once as a CUDA graph and replayed per step.

    Its inputs live in static buffers: the previous tokens, and the position as a 0-d device tensor, so
    that the graph is the same at every step (the self-attention caches become `StaticKVCache`s over the
    same buffers). Beam search reorders `self.cache` in place between replays. On a CPU, or if capture fails
    (then with a warning), the same static step runs eagerly: the tests check it there against the ordinary
    cached step."""

    def __init__(self, model: Seq2SeqModel, memory: torch.Tensor, mask: torch.Tensor | None, cache,
                 capture: bool = True):
        self.model, self.memory, self.mask = model, memory, mask
        self.cache = model.static_cache(cache)
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
        self.model.mark_written(self.cache, step)                         # what beam search reorders
        if self.graph is None:
            return self._run()
        self.graph.replay()
        return self.logits
