"""model/decode.py: cached against uncached decoding, beam search against greedy, length limits."""

import torch

from model import Transformer, beam_search, greedy
from tests.helpers import small


def test_cached_decoding_matches_uncached_logits_step_by_step():
    model = Transformer(small(positional="rope")).eval()
    src = torch.randint(4, 40, (2, 5))
    memory, mask = model.encode(src)
    prefix = torch.randint(4, 40, (2, 6))
    cache = model.new_cache(2, 6, memory)
    with torch.no_grad():
        full = model.out_proj(model.decode(prefix, memory, mask))       # (B, T, V)
        for t in range(6):
            step = model.decode_step(prefix[:, t], memory, mask, cache, t)
            assert torch.allclose(step, full[:, t], atol=1e-5)


def test_beam_of_one_without_length_penalty_is_greedy():
    torch.manual_seed(3)
    model = Transformer(small())
    src = torch.randint(4, 40, (5, 8))
    src[1, 4:] = 0
    assert beam_search(model, src, 2, 3, beam_size=1, alpha=0.0, max_extra=10) == \
        greedy(model, src, 2, 3, max_extra=10)


def test_decoding_never_runs_past_the_position_table():
    model = Transformer(small(max_len=12)).eval()
    src = torch.randint(4, 40, (2, 10))
    assert all(len(s) <= 12 for s in greedy(model, src, 2, -1, max_extra=50))
    assert all(len(s) <= 12 for s in beam_search(model, src, 2, -1, beam_size=2, max_extra=50))


def test_beam_search_respects_the_length_limit_and_finds_likelier_outputs():
    torch.manual_seed(1)
    model = Transformer(small()).eval()
    src = torch.randint(4, 40, (6, 5))
    for seq in beam_search(model, src, 2, 3, beam_size=4, alpha=0.6, max_extra=3):
        assert len(seq) <= 5 + 3
    # With alpha = 0 beam search ranks by log-probability: it never returns a less likely output than greedy.
    def logprob(seqs):
        out = []
        for i, seq in enumerate(seqs):
            tgt = torch.tensor([[2] + seq + ([3] if len(seq) < 8 else [])])
            with torch.no_grad():
                lp = model(src[i:i + 1], tgt[:, :-1]).log_softmax(-1)
            out.append(lp[0].gather(1, tgt[0, 1:, None]).sum().item())
        return out
    g = logprob(greedy(model, src, 2, 3, max_extra=3))
    b = logprob(beam_search(model, src, 2, 3, beam_size=4, alpha=0.0, max_extra=3))
    assert all(bb >= gg - 1e-4 for bb, gg in zip(b, g))
