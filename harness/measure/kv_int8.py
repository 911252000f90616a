"""What an int8 KV cache costs in quality (model.kv_cache_dtype; KIVI, vLLM's quantized caches): on the final
weights, the first `train.kv_int8_sentences` dev sentences decoded with the model's own cache and with an int8 one
(model/attention.py, Int8Rows), greedy and with the run's beam: the tokenized BLEU of each and their difference.
Teacher-forced scoring (the dev PPL) reads no cache, so it cannot change (tests/test_kv_int8.py checks it)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.measure.registry import Context, Measurement, Metric, SectionContext, register


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev sentences decoded both ways (0: not measured)


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.errors import UserError
    if getattr(model_cfg, "family", "transformer") != "transformer":
        raise UserError("train.kv_int8_sentences measures the Transformer's int8 cache; this model family has "
                         "none (model.family transformer only)")


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.kv_int8 import bleu_by_cache
    n, t, out = min(s.sentences, len(ctx.dev.data)), ctx.train, {}
    for search, beam in (("greedy", 1), ("beam", t.beam_size)):
        bleu = bleu_by_cache(ctx.model, ctx.tokenizer, ctx.dev, n, ctx.device, beam_size=beam, alpha=t.alpha,
                             max_extra=t.max_extra, max_tokens=t.max_tokens, autocast=ctx.autocast, lang=ctx.lang,
                             moses=str(t.bleu_moses))
        out.update({f"kv_{search}_bleu_model": bleu["model"], f"kv_{search}_bleu_int8": bleu["int8"],
                    f"kv_{search}_bleu_delta": bleu["int8"] - bleu["model"]})
    out["kv_sentences"] = n
    return out


def _section(ctx: SectionContext):
    from harness.report.cells import bracket_cell, md_table
    from harness.report.results import finished
    body = []
    for row in ctx.rows:
        g = finished(ctx.runs, row)
        col = lambda k: g[f"metrics.{k}"].dropna().tolist() if f"metrics.{k}" in g else []   # noqa: E731
        if not col("kv_beam_bleu_delta"):
            continue
        body.append([f"**{row}**", len(col("kv_beam_bleu_delta")),
                     *(bracket_cell(col(f"kv_{search}_bleu_{k}"), "{:+.2f}" if k == "delta" else "{:.2f}")
                       for search in ("greedy", "beam") for k in ("model", "int8", "delta"))])
    if not body:
        return [], []
    return (["## An int8 KV cache", "",
             "The first dev sentences decoded twice from the final weights, with the model's own cache and with an "
             "int8 one (a float16 scale per head and position), greedy and with the run's beam: tokenized BLEU, "
             "mean over seeds with its 95 % interval. The dev PPL reads no cache and is the same both ways.", "",
             *md_table(["row", "seeds", "greedy", "greedy, int8", "Δ", "beam", "beam, int8", "Δ"], body), ""], [])


register(Measurement(
    "kv_int8", Settings, "decoding with an int8 KV cache against the model's own: dev BLEU both ways",
    metrics=(Metric("kv_beam_bleu_delta", "", "BLEU, int8 cache minus the model's (beam)", claim="kv_int8_delta"),
             Metric("kv_greedy_bleu_delta", "", "BLEU, int8 cache minus the model's (greedy)"),
             Metric("kv_beam_bleu_model", "higher", "BLEU, the model's cache (beam)"),
             Metric("kv_beam_bleu_int8", "higher", "BLEU, int8 cache (beam)")),
    check=_check, at_end=_measure, section=_section, section_rank=60))
