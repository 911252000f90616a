"""The corpus on disk: train/dev/test with gold trees and a manifest, written whole, reused while its
settings and the generator's version match; the directory a DataConfig's settings name."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

from harness.data.synth.config import GENERATOR_VERSION, MAX_PAIRS, SPLITS, Example, SynthConfig
from harness.data.synth.sentences import _check_cfg, _check_int, _stream
from harness.errors import UserError
from harness.io import atomic_dir


def _request(n_train: int, n_dev: int, n_test: int, seed: int, cfg: SynthConfig) -> dict:
    """The part of the manifest that decides the contents: equal requests give identical files."""
    settings = asdict(cfg)
    if settings["target"] == "de":   # German-like corpora made before the French-like target keep their manifests
        del settings["target"]
    return {"generator": "harness.data.synth", "generator_version": GENERATOR_VERSION, "seed": seed,
            "sizes": {"train": n_train, "dev": n_dev, "test": n_test}, "cfg": settings}


def _read_manifest(out: Path) -> dict | None:
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files_ok = all((out / f"{s}.{k}").is_file() for s in SPLITS for k in ("src", "tgt", "tree"))
    return manifest if isinstance(manifest, dict) and files_ok else None


def _existing(out: Path, request: dict) -> dict | None:
    """The manifest of an identical corpus at `out`; None if `out` is absent or empty; else UserError."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise UserError(f"The output path {out} is a file; give a directory for the corpus.")
    if not any(out.iterdir()):
        return None
    manifest = _read_manifest(out)
    if manifest is None:
        raise UserError(f"The output directory {out} is not empty and holds no synthetic corpus; "
                        "give a new or empty directory.")
    if {k: manifest.get(k) for k in request} != request:
        raise UserError(f"The output directory {out} holds a synthetic corpus made with other settings "
                        "(seed, sizes or config); delete it or give another directory.")
    return manifest


def write_corpus(out_dir: str | Path, n_train: int, n_dev: int, n_test: int, seed: int,
                 cfg: SynthConfig = SynthConfig(),
                 progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Writes train.src, train.tgt, train.tree, dev.*, test.* (UTF-8, one sentence a line, "\\n" endings),
    atomically (write to a temp dir in out_dir's parent, then rename), and a small manifest.json (sizes,
    seed, cfg as dict, counts of words/types, mean lengths). dev and test use their own random streams
    (train is exactly generate(n_train, seed, cfg)). An identical corpus already at out_dir is reused.
    progress(split, done, total) is called every 100k pairs and at the end of each split. Returns the
    manifest dict."""
    for name, n in (("n_train", n_train), ("n_dev", n_dev), ("n_test", n_test)):
        _check_int(f"the number of {name[2:]} pairs", n, 1, MAX_PAIRS)
    _check_int("the seed", seed, 0)
    _check_cfg(cfg)
    out = Path(out_dir).expanduser().absolute()
    request = _request(n_train, n_dev, n_test, seed, cfg)
    if (manifest := _existing(out, request)) is not None:
        return manifest
    with atomic_dir(out) as tmp:
        stats = {}
        for stream, (split, n) in enumerate(zip(SPLITS, (n_train, n_dev, n_test))):
            stats[split] = _write_split(tmp, split, _stream(n, seed, stream, cfg), n, progress)
        manifest = {**request, "splits": stats,
                    "files": [f"{s}.{k}" for s in SPLITS for k in ("src", "tgt", "tree")]}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    # Ours, or the same corpus that another process finished first (anything else is refused here).
    return _existing(out, request)


def _write_split(tmp: Path, split: str, examples: Iterator[Example], n: int,
                 progress: Callable[[str, int, int], None] | None) -> dict:
    src_types: set[str] = set()
    tgt_types: set[str] = set()
    n_src = n_tgt = max_src = max_tgt = done = 0
    handles = [open(tmp / f"{split}.{kind}", "w", encoding="utf-8", newline="\n")
               for kind in ("src", "tgt", "tree")]
    try:
        chunk: tuple[list, list, list] = ([], [], [])
        for ex in examples:
            s, t = ex.src.split(), ex.tgt.split()
            src_types.update(s)  # a set update per line is cheap even at 10 M pairs; a Counter is not
            tgt_types.update(t)
            n_src, n_tgt = n_src + len(s), n_tgt + len(t)
            max_src, max_tgt = max(max_src, len(s)), max(max_tgt, len(t))
            chunk[0].append(ex.src)
            chunk[1].append(ex.tgt)
            chunk[2].append(ex.tree)
            done += 1
            if done % 100_000 == 0 or done == n:
                for h, lines in zip(handles, chunk):
                    h.write("\n".join(lines) + "\n")
                    lines.clear()
                if progress:
                    progress(split, done, n)
    finally:
        for h in handles:
            h.close()
    return {"pairs": done, "src_tokens": n_src, "tgt_tokens": n_tgt, "src_types": len(src_types),
            "tgt_types": len(tgt_types), "mean_src_len": round(n_src / done, 3),
            "mean_tgt_len": round(n_tgt / done, 3), "max_src_len": max_src, "max_tgt_len": max_tgt}


def synth_config(cfg) -> SynthConfig:
    """The grammar and lexicon settings a DataConfig names (lexicon seed and scale, depth, length, target)."""
    lex = SynthConfig(max_depth=cfg.max_depth, max_len=cfg.max_words, target=cfg.target, lexicon_seed=cfg.lexicon_seed)
    if cfg.lexicon_scale != 1.0:
        lex = SynthConfig(max_depth=cfg.max_depth, max_len=cfg.max_words, target=cfg.target,
                          lexicon_seed=cfg.lexicon_seed,
                          **{f: max(2, round(getattr(lex, f) * cfg.lexicon_scale))
                             for f in ("n_nouns", "n_verbs", "n_adjectives", "n_adverbs", "n_ambiguous")})
    return lex


def synth_corpus_dir(cfg) -> Path:
    """The made-up corpus a DataConfig names (sizes, seed, lexicon seed and scale, depth, length), written once into
    its cache directory (write_corpus); returns the directory."""
    lexicon_seed = cfg.lexicon_seed
    lex = synth_config(cfg)
    scale = "" if cfg.lexicon_scale == 1.0 else f"-lex{cfg.lexicon_scale:g}"
    grammar = SynthConfig()
    if (cfg.max_depth, cfg.max_words) != (grammar.max_depth, grammar.max_len):   # the defaults keep their old names
        scale += f"-d{cfg.max_depth}-w{cfg.max_words}"
    if cfg.target != grammar.target:
        scale += f"-{cfg.target}"
    if lexicon_seed:                                  # the default lexicon keeps the old cache names
        scale += f"-L{lexicon_seed}"
    root = Path(cfg.cache_dir).resolve() / \
        f"synth-{cfg.train_pairs}-{cfg.dev_pairs}-{cfg.test_pairs}-s{cfg.seed}{scale}"
    write_corpus(root, cfg.train_pairs, cfg.dev_pairs, cfg.test_pairs, cfg.seed, lex)
    return root
