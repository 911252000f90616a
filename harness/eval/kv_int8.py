"""Decoding with an int8 KV cache beside the model's own (model/attention.py: Int8Rows, kv_cache_dtype): the same
sentences translated both ways and scored with tokenized BLEU, for harness/measure/kv_int8.py."""

from __future__ import annotations

from harness.data.batching import ParallelData
from harness.eval.bleu import tokenized_bleu
from harness.eval.evaluate import translate


def bleu_by_cache(model, tokenizer, dev, n: int, device, *, beam_size: int, alpha: float, max_extra: int,
                  max_tokens: int, autocast, lang: str, moses: str) -> dict[str, float]:
    """{"model": BLEU, "int8": BLEU} of the first n dev sentences decoded with each cache."""
    from model.attention import kv_cache_dtype
    subset = ParallelData(dev.data.src_ids[:n], dev.data.tgt_ids[:n])
    out = {}
    for dtype in ("model", "int8"):
        with kv_cache_dtype(model, dtype):
            hyps = translate(model, tokenizer, subset, device, beam_size=beam_size, alpha=alpha, max_extra=max_extra,
                             max_tokens=max_tokens, autocast=autocast)
        out[dtype] = tokenized_bleu(hyps, dev.tgt_text[:n], lang=lang, moses=moses).score
    return out
