"""Greedy and batched beam search (§6.1: beam 4, length penalty alpha = 0.6, max length = input + 50,
terminating early when possible), incremental with the per-layer KV cache.

Both take a padded source batch (B, S) and return, per sentence, the generated token ids without BOS/EOS.
`use_cache=False` recomputes the whole decoder prefix at every step: the slow reference for tests and
for the benchmark's cache speed-up.

On a GPU each cached step is the replay of one captured CUDA graph (`model.cuda_graph.StepGraph`).
"""

from __future__ import annotations

import torch

from .cuda_graph import StepGraph
from .family import Seq2SeqModel


def _stepper(model: Seq2SeqModel, memory: torch.Tensor, mask: torch.Tensor | None, rows: int, steps: int,
             use_cache: bool, graph: bool | None):
    """(cache, step function(tokens (rows, t + 1), t) -> logits) for the loops below. graph=None: a
    captured graph on CUDA, the ordinary cached step elsewhere; True forces the static step (eager on a
    CPU, as the tests run it); False never captures."""
    if not use_cache:
        return None, lambda tokens, t: model.out_proj(model.decode(tokens, memory, mask)[:, -1])
    cache = model.new_cache(rows, steps, memory)
    # Word positions depend on the tokens so far, which a captured step does not see: they decode eagerly.
    # A family whose step cannot be captured (no `capturable`) always steps eagerly.
    # A sliding-window cache is a ring whose slots are not positions, and an int8 cache is written through its
    # quantizer: both decode eagerly too.
    capturable = getattr(model, "capturable", False) and not getattr(model.cfg, "word_positions", False) \
        and not getattr(model.cfg, "attention_window", 0) and getattr(model.cfg, "kv_cache_dtype", "model") == "model"
    if capturable and (graph or (graph is None and memory.device.type == "cuda")):
        step = StepGraph(model, memory, mask, cache)
        return step.cache, lambda tokens, t: step(tokens[:, -1], t)
    positions = getattr(model, "step_positions", lambda tokens: None)     # word positions: a Transformer's
    return cache, lambda tokens, t: model.decode_step(tokens[:, -1], memory, mask, cache, t, positions(tokens))


def _length_limits(model: Seq2SeqModel, src: torch.Tensor, max_extra: int) -> torch.Tensor:
    """Per-sentence output limit: source length + max_extra tokens (EOS included), and never more
    positions than the model has (cfg.max_len)."""
    return ((src != model.cfg.pad_id).sum(1) + max_extra).clamp(max=model.cfg.max_len)


def _strip(seq: list[int], eos: int) -> list[int]:
    return seq[:seq.index(eos)] if eos in seq else seq


@torch.no_grad()
def greedy(model: Seq2SeqModel, src: torch.Tensor, bos: int, eos: int, max_extra: int = 50,
           use_cache: bool = True, graph: bool | None = None) -> list[list[int]]:
    model.eval()
    memory, mask = model.encode(src)
    limits = _length_limits(model, src, max_extra)
    steps = int(limits.max())
    batch = src.size(0)
    tokens = torch.full((batch, 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    lengths = limits.clone()                       # tokens kept per sentence, EOS included
    _, next_logits = _stepper(model, memory, mask, batch, steps, use_cache, graph)
    for t in range(steps):
        nxt = next_logits(tokens, t).argmax(-1)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        lengths = torch.where(~done & (nxt == eos), t + 1, lengths)
        done |= (nxt == eos) | (t + 1 >= limits)
        if bool(done.all()):
            break
    return [_strip(row[:n], eos) for row, n in zip(tokens[:, 1:].tolist(), lengths.tolist())]


def length_penalty(length: int | torch.Tensor, alpha: float):
    """GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha; a hypothesis is ranked by log P(Y) / lp(Y)."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: Seq2SeqModel, src: torch.Tensor, bos: int, eos: int, beam_size: int = 4,
                alpha: float = 0.6, max_extra: int = 50, use_cache: bool = True,
                graph: bool | None = None, constraint=None) -> list[list[int]]:
    """Batched beam search. Each step extends every live beam, keeps the 2K best candidates so that K
    live ones remain after some end in EOS, moves finished ones aside with their length-normalized score,
    and stops a sentence once no live beam can beat its best finished hypothesis (log-probabilities only
    fall and the penalty is largest at the length limit) or the limit is reached.

    constraint (optional, not in the paper): an object told each sentence's length limit once
    (`start(limits)`, (B,) tokens with EOS), whose `mask(t) -> (B*K, V)` is added to the step's
    log-probabilities (0 allowed, -inf not), and told by `advance(src_rows, tokens)` which beams survived and
    which token each appended; rows are sentence-major, K beams a sentence (Table 4's tree constraint)."""
    model.eval()
    k = beam_size
    memory, mask = model.encode(src)
    batch, device = src.size(0), src.device
    memory = memory.repeat_interleave(k, dim=0)                          # (B*K, S, d_model)
    mask = mask.repeat_interleave(k, dim=0) if mask is not None else None
    limits = _length_limits(model, src, max_extra)                       # (B,)
    best_possible_lp = length_penalty(limits.float(), alpha)
    steps = int(limits.max())
    if constraint is not None:
        constraint.start(limits)
    tokens = torch.full((batch * k, 1), bos, dtype=torch.long, device=device)
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0                                                   # one live beam at the start
    best_score = torch.full((batch,), float("-inf"), device=device)
    best_seq: list[list[int]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    cache, next_logits = _stepper(model, memory, mask, batch * k, steps, use_cache, graph)
    rows = torch.arange(batch, device=device)[:, None] * k
    for t in range(steps):
        logp = next_logits(tokens, t).float().log_softmax(-1)                                # (B*K, V)
        if constraint is not None:
            logp = logp + constraint.mask(t)
        vocab = logp.size(-1)
        cand = (scores[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)
        top_scores, top_ids = cand.topk(2 * k, dim=1)                    # (B, 2K)
        beam, tok = top_ids // vocab, top_ids % vocab
        at_limit = (t + 1 >= limits)[:, None]
        is_eos = tok == eos
        # As in fairseq, an EOS candidate finishes only if it ranks among the K best: finished hypotheses
        # compete for the K beam slots, which also makes beam 1 exactly greedy (with alpha = 0).
        finishing = (is_eos & (torch.arange(2 * k, device=device) < k)) | at_limit
        fin_scores = torch.where(finishing, top_scores / length_penalty(t + 1, alpha), float("-inf"))
        fin_best, fin_j = fin_scores.max(dim=1)
        improved = (fin_best > best_score) & ~done
        for b in improved.nonzero().flatten().tolist():
            j = int(fin_j[b])
            best_score[b] = fin_best[b]
            best_seq[b] = tokens[b * k + int(beam[b, j]), 1:].tolist() + [int(tok[b, j])]
        live_scores, order = torch.where(is_eos | at_limit, float("-inf"), top_scores).topk(k, dim=1)
        src_rows = (rows + beam.gather(1, order)).view(-1)               # (B*K,) beams that survive
        tokens = torch.cat([tokens[src_rows], tok.gather(1, order).view(-1, 1)], dim=1)
        scores = live_scores
        if constraint is not None:
            constraint.advance(src_rows, tokens[:, -1])
        if cache is not None:
            model.reorder_cache(cache, src_rows)
        done |= at_limit[:, 0] | (best_score >= scores[:, 0] / best_possible_lp)
        if bool(done.all()):
            break
    return [_strip(seq, eos) for seq in best_seq]
