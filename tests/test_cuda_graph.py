"""model/cuda_graph.py: the static decoding step against the cached step, and captured graphs on CUDA."""

import pytest
import torch

from model import Transformer, beam_search, greedy
from tests.helpers import VARIANTS, small


@pytest.mark.parametrize("name", ["paper", "rope", "alibi", "learned", "gqa", "pre_rms", "additive"])
def test_the_static_step_of_cuda_graphs_gives_the_cached_steps_logits(name):
    """StepGraph runs decode_step with the position as a device tensor, writing the cache there and attending
    to the whole buffer: what a captured graph replays. Eager here on a CPU: equal logits to the ordinary
    cached step at every position, also after a beam-style reorder of the caches between steps."""
    torch.manual_seed(0)
    model = Transformer(small(**VARIANTS[name])).eval()

    def reorder_cross(caches, order):              # the Transformer's cross-attention caches follow their rows
        for _, cross in caches:
            cross.reorder(order)
    _check_static_steps(model, reorder_cross)


def _check_static_steps(model, reorder_more) -> None:
    """The static step (StepGraph, eager here) against the ordinary cached step at every position of a padded
    batch, also after rows 0 and 2 swap places and row 0 is copied over row 2 at step 4 (model.reorder_cache,
    then reorder_more(caches, order) for what else of a family's cache follows its rows)."""
    from model.cuda_graph import StepGraph
    src = torch.randint(4, 40, (3, 7))
    src[1, 5:] = 0
    prefix = torch.randint(4, 40, (3, 9))
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = model.new_cache(3, 9, memory)
        static = StepGraph(model, memory, mask, model.new_cache(3, 9, memory))
        for t in range(9):
            want = model.decode_step(prefix[:, t], memory, mask, cache, t)
            assert torch.allclose(static(prefix[:, t], t), want, atol=1e-5), t
            if t == 4:
                order = torch.tensor([2, 0, 0])
                for caches in (cache, static.cache):
                    model.reorder_cache(caches, order)
                    reorder_more(caches, order)
                prefix, memory, mask = prefix[order], memory[order], mask[order]
                static.memory, static.mask = memory, mask


DECODER_ONLY = {"prefix": {}, "causal": dict(lm="causal"),
                "redesign": dict(positional="rope", norm_position="pre", norm="rms", ffn="swiglu", n_kv_heads=2)}


@pytest.mark.parametrize("name", DECODER_ONLY)
def test_the_decoder_only_static_step_gives_the_cached_steps_logits(name):
    """The decoder-only family's captured step: its cache holds the prefilled source in the first S slots and
    the target from slot S on, the source's padding masked over the whole buffer. Eager here: equal logits to
    the ordinary cached step at every position, also after a reorder that moves rows between sentences of
    different source lengths; and greedy and beam search equal with and without the static step."""
    from model.decoder_only import DecoderOnly, DecoderOnlyConfig
    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=64,
                                          p_drop=0.0, **DECODER_ONLY[name])).eval()
    assert model.capturable

    def reorder_lengths(caches, order):            # each row's source length moves with it
        caches.lengths = caches.lengths[order]
    _check_static_steps(model, reorder_lengths)
    src = torch.randint(4, 40, (3, 7))
    src[1, 5:] = 0
    with torch.no_grad():
        for search in (greedy, beam_search):
            assert search(model, src, 2, 3, max_extra=8, graph=True) == search(model, src, 2, 3, max_extra=8,
                                                                               graph=False)


def test_the_static_step_decodes_under_bf16_autocast_as_the_cached_step_does():
    """Under autocast the projections give bf16 keys while the cache keeps the memory's fp32 (as a GPU's bf16
    decoding has it): the static step stores them as the ordinary step does, and its logits agree to bf16
    rounding (a unit in the last place is 1/64 at these magnitudes, so outputs of this untrained model,
    whose top two logits sometimes tie, are not compared token by token)."""
    from model.cuda_graph import StepGraph
    torch.manual_seed(0)
    model = Transformer(small(**VARIANTS["gqa"])).eval()
    src = torch.randint(4, 40, (4, 8))
    src[1, 5:] = 0
    prefix = torch.randint(4, 40, (4, 10))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        memory, mask = model.encode(src)
        cache = model.new_cache(4, 16, memory)
        static = StepGraph(model, memory, mask, model.new_cache(4, 16, memory))
        for t in range(10):
            want = model.decode_step(prefix[:, t], memory, mask, cache, t).float()
            assert (static(prefix[:, t], t).float() - want).abs().max() <= 4 / 64, t
        outputs = beam_search(model, src, 2, 3, max_extra=8, graph=True)
    assert len(outputs) == 4 and all(0 < len(o) <= 16 for o in outputs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_decoding_from_captured_cuda_graphs_equals_decoding_step_by_step():
    from model.cuda_graph import StepGraph
    torch.manual_seed(0)
    model = Transformer(small(**VARIANTS["rope"])).cuda().eval()
    src = torch.randint(4, 40, (6, 9), device="cuda")
    src[2, 6:] = 0
    with torch.no_grad():
        memory, mask = model.encode(src)
        assert StepGraph(model, memory, mask, model.new_cache(6, 12, memory)).graph is not None
    assert greedy(model, src, 2, 3, max_extra=8) == greedy(model, src, 2, 3, max_extra=8, graph=False)
    assert beam_search(model, src, 2, 3, max_extra=8) == beam_search(model, src, 2, 3, max_extra=8, graph=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", DECODER_ONLY)
def test_decoder_only_decoding_from_captured_cuda_graphs_equals_decoding_step_by_step(name):
    from model.cuda_graph import StepGraph
    from model.decoder_only import DecoderOnly, DecoderOnlyConfig
    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=64,
                                          p_drop=0.0, **DECODER_ONLY[name])).cuda().eval()
    src = torch.randint(4, 40, (6, 9), device="cuda")
    src[2, 6:] = 0
    with torch.no_grad():
        memory, mask = model.encode(src)
        assert StepGraph(model, memory, mask, model.new_cache(6, 12, memory)).graph is not None
    assert greedy(model, src, 2, 3, max_extra=8) == greedy(model, src, 2, 3, max_extra=8, graph=False)
    assert beam_search(model, src, 2, 3, max_extra=8) == beam_search(model, src, 2, 3, max_extra=8, graph=False)
