"""The sections every rows layout adds below its tables: each row's architecture manifest, and the sections of
the measurements its runs took (harness/measure, each registered measurement's own)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.measure.registry import SectionContext, by_section_rank
from harness.report.cells import md_table


def architecture_section(runs: pd.DataFrame, order: list[str]) -> list[str]:
    """Each row's architecture manifest (harness/probes/manifest.py), computed from the model settings its first
    finished trial logged, with its exact parameter count."""
    from harness.probes.manifest import manifest
    done = runs[runs["status"] == "FINISHED"]
    body = []
    for row in order:
        g = done[done["tags.row"].astype(str) == row]
        if not len(g):
            continue
        first = g.iloc[0]
        settings = {k[len("params.model."):]: v for k, v in first.items()
                    if k.startswith("params.model.") and isinstance(v, str)}
        try:
            m = manifest(settings)
        except KeyError:         # a store that logged only some model settings (an older run): no manifest
            continue
        params = first.get("metrics.params")
        body.append([f"**{row}**", m["architecture"], m.get("layers", "–"), m.get("d_model", "–"),
                     m.get("attention", "–"),
                     f"{m.get('query_heads', '–')} / {m.get('kv_heads', '–')}", m.get("head_dim", "–"),
                     m.get("context_length", "–"), m.get("positions", "–"), m.get("norm", "–"), m.get("ffn", "–"),
                     m.get("kv_bytes_per_target_token_bf16", "–"), m.get("kv_bytes_per_source_token_bf16", "–"),
                     f"{int(params):,}" if pd.notna(params) else "–"])
    if not body:
        return []
    head = ["row", "architecture", "layers", "d_model", "attention", "query / KV heads", "head dim", "context",
            "positions", "norm", "FFN", "KV bytes / target token (bf16)", "KV bytes / source token (bf16)",
            "parameters"]
    return (
        [
            "## Architectures",
            "",
            "Each row's architecture manifest (every trial also keeps it as `architecture.json`, an MLflow artifact): "
            "KV-cache bytes are what incremental decoding keeps per token at bf16, the self-attention cache per target "
            "token, and per source token the encoder-decoder's cross-attention cache or the decoder-only model's "
            "prefilled cache (harness/probes/manifest.py); the parameters are each row's exact count.",
            "",
        ]
        + md_table(head, body)
        + [""]
    )


def measurement_sections(runs: pd.DataFrame, order: list[str], uri: str, out_dir: Path,
                         study: str) -> tuple[list[str], list[Path]]:
    """The sections of the measurements the runs took (harness/measure: each registered measurement's own,
    by its section_rank, over the rows of `order`): their lines, their images linked, and their PNGs."""
    lines: list[str] = []
    plots: list[Path] = []
    ctx = SectionContext(runs, order, uri, out_dir, study)
    for m in by_section_rank():
        if m.section is not None:
            more, pngs = m.section(ctx)
            lines += more
            plots += pngs
    return lines, plots
