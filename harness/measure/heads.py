"""The heads probe (harness/eval/heads.py, the paper's Figures 3-5 measured) on the final weights of the made-up
corpus's encoder-decoder, over the first `train.heads_sentences` dev sentences with their gold trees: head scores,
each head masked, pruning curves, logged as heads_* metrics and the artifact heads.json beside the weights.
`python -m harness probe heads RUN_DIR` takes it on a finished run."""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.errors import UserError
from harness.measure.registry import Context, Measurement, Metric, SectionContext, register

SETTING = "train.heads_sentences"


@dataclass(frozen=True)
class Settings:
    sentences: int = 0          # dev sentences probed, at least 4 (0: not probed)
    contrasts: int = 200        # sentences of agreement contrasts scored under each ablation (0: none)
    beam: int = 1               # the beam of the decodes under ablation (greedy: a probe makes over a hundred)


def _check(s: Settings, model_cfg, data_cfg) -> None:
    from harness.eval.heads import check_heads_data
    check_heads_data(data_cfg)
    family = getattr(model_cfg, "family", "transformer")
    if family != "transformer":
        raise UserError(f"{SETTING} probes the Transformer's heads; this row's model is the {family} family (set "
                        f"{SETTING} 0 for it).")
    if s.beam < 1:
        raise UserError(f"train.heads_beam {s.beam}: the beam is at least 1.")


def _measure(ctx: Context, s: Settings) -> dict:
    from harness.eval.heads import dev_trees, heads_probe
    from harness.io import atomic_write
    t = ctx.train
    metrics, payload = heads_probe(ctx.model, ctx.tokenizer, ctx.dev, dev_trees(ctx.data_cfg), ctx.data_cfg,
                                   ctx.device, sentences=s.sentences, contrast_sentences=s.contrasts, beam=s.beam,
                                   max_extra=t.max_extra, max_tokens=t.max_tokens, lang=ctx.lang,
                                   moses=str(t.bleu_moses))
    if ctx.out is not None:     # per-head scores and ablations, the curves, the figures' attention
        atomic_write(ctx.out / "heads.json", json.dumps(payload) + "\n")
    return {"heads_sentences": payload["sentences"], **metrics}


def _section(ctx: SectionContext):
    from harness.report.heads import heads_section
    return heads_section(ctx.runs, ctx.uri, ctx.out_dir, ctx.study, SETTING)


register(Measurement(
    "heads", Settings, "the paper's Figures 3-5 measured: head scores, masking, pruning (made-up corpus)",
    # the best encoder head's score on verb -> subject pairs at least 4 words apart minus the best fixed offset's
    # (points); the share of the encoder's heads masked, least important first, before BLEU falls more than 1
    # below the unmasked model's; Spearman's rho between the heads' relation gains and the harm of masking each
    metrics=(Metric("heads_sentences", "", "dev sentences probed", aggregate="first"),
             Metric("heads_subject_long_gain", "higher", "best head's gain on long verb -> subject",
                    claim="heads_long_gain"),
             Metric("heads_prunable_enc", "higher", "share of encoder heads prunable", claim="heads_prunable"),
             Metric("heads_rho_zero", "higher", "Spearman rho, relation gain vs masking harm", claim="heads_rho")),
    check=_check, at_end=_measure, section=_section, section_rank=10, on=lambda s: s.sentences > 0,
    smoke={"sentences": 4, "contrasts": 4}))
