"""The Penn Treebank for Table 4, prepared from `.mrg` files the user has:

    python -m harness data prepare ptb --from DIR --out data/ptb-wsj-sample

DIR is either
  - the full WSJ (LDC99T42): section folders 00..24 of `wsj_SSNN.mrg` files, in DIR or in DIR/wsj (as the
    LDC release has them under parsed/mrg/wsj/); the standard split: sections 02-21 train, 22 dev, 23 test;
  - or a folder of `wsj_NNNN.mrg` files with no sections, such as the sample NLTK distributes
    (nltk_data/corpora/treebank/combined/, wsj_0001.mrg to wsj_0199.mrg): split by file number, so that a
    file's split never depends on which other files are there: wsj_0001-0139 train, wsj_0140-0159 dev,
    wsj_0160 and above test (`SAMPLE_SPLITS`).

Each tree is cleaned as parsing as translation does (Vinyals et al. 2015; the paper's §6.3 follows them) and
as EVALB's COLLINS.prm expects of gold trees: empty elements (-NONE-) and the constituents they leave empty
removed, function tags and indices cut (NP-SBJ-1 -> NP, PP-LOC=2 -> PP). The output is one tree a line,
{train,dev,test}.tree, with the PTB's empty root bracket kept, and manifest.json with the counts (made here:
NLTK's own README for the sample gives a stale one). Table 4's parse task reads such a directory
(harness/data/parse.py) and linearizes the trees itself.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from harness.data.parse import WSJ_SPLITS, clean_tree, sentence_words
from harness.data.readers import write_lines
from harness.data.trees import parse_tree, read_tree_texts
from harness.errors import UserError
from harness.io import atomic_writer

# The sample's split by file number (first, last; None: no upper bound). Chosen once, before any model was
# trained on it: the last fifth of the 179 files in hand kept out of training, half for dev and half for
# test (328 and 273 sentences), and every higher-numbered file (the rest of NLTK's 199) test as well.
SAMPLE_SPLITS = {"train": (1, 139), "dev": (140, 159), "test": (160, None)}
_MRG = re.compile(r"^wsj_(\d{4})\.mrg$", re.IGNORECASE)


def _sections(root: Path) -> Path | None:
    """The folder holding WSJ section folders (00..24 of .mrg files): root or root/wsj, or None."""
    for cand in (root, root / "wsj"):
        if cand.is_dir() and any((cand / s).is_dir() and any((cand / s).glob("*.mrg"))
                                 for secs in WSJ_SPLITS.values() for s in secs):
            return cand
    return None


def _sample_split(number: int) -> str | None:
    for split, (lo, hi) in SAMPLE_SPLITS.items():
        if number >= lo and (hi is None or number <= hi):
            return split
    return None


def find_files(root: Path) -> tuple[str, dict[str, list[Path]]]:
    """('sections' or 'files', {split: the .mrg files in order}); a split may be empty for a folder of files."""
    secs = _sections(root)
    if secs is not None:
        files = {split: sorted(p for s in sections for p in (secs / s).glob("*.mrg"))
                 for split, sections in WSJ_SPLITS.items()}
        empty = [f"{split} (section{'s' if len(WSJ_SPLITS[split]) > 1 else ''} {', '.join(WSJ_SPLITS[split])})"
                 for split, ps in files.items() if not ps]
        if empty:
            raise UserError(f"{secs}: WSJ section folders without .mrg files for {'; '.join(empty)}; the standard "
                            "split needs sections 02-21 (train), 22 (dev) and 23 (test).")
        return "sections", files
    folder = next((c for c in (root, root / "combined") if c.is_dir() and any(_MRG.match(n) for n in os.listdir(c))),
                  None)
    if folder is None:
        raise UserError(f"{root}: no wsj_NNNN.mrg files and no WSJ section folders (00..24) found; pass NLTK's "
                        "treebank/combined folder or the WSJ's parsed/mrg/wsj folder.")
    files: dict[str, list[Path]] = {split: [] for split in SAMPLE_SPLITS}
    for name in sorted(os.listdir(folder)):
        m = _MRG.match(name)
        split = _sample_split(int(m.group(1))) if m else None
        if split is not None:
            files[split].append(folder / name)
    return "files", files


def _clean_trees(path: Path) -> tuple[list[str], int, int]:
    """(cleaned trees as one-line strings, words in them, trees dropped for having no words) of one file."""
    out, words, dropped = [], 0, 0
    for line, text in read_tree_texts(path):
        if not text.strip():
            continue
        try:
            tree = parse_tree(text)
        except ValueError as exc:
            raise UserError(f"{path}:{line}: cannot read the tree ({exc}); expected Penn Treebank brackets such "
                            "as ( (S (NP-SBJ (DT The) (NN dog)) (VP (VBZ runs)) (. .)) ).") from None
        cleaned, (ws, _) = clean_tree(tree), sentence_words(tree)
        if cleaned is None or not ws:
            dropped += 1
            continue
        out.append(str(cleaned))
        words += len(ws)
    return out, words, dropped


def prepare_ptb(from_dir: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Write out_dir/{train,dev,test}.tree (cleaned, one tree a line; a split without files is not written)
    and manifest.json; return the manifest. Every file is read and checked before anything is written."""
    root, out = Path(from_dir), Path(out_dir)
    if not root.is_dir():
        raise UserError(f"{root}: not a directory; pass the folder of Penn Treebank .mrg files (NLTK's "
                        "treebank/combined, or the WSJ's section folders).")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; pass a directory for the prepared trees.")
    layout, files = find_files(root)
    trees: dict[str, list[str]] = {}
    manifest: dict = {"from_dir": str(root.resolve()), "dataset": "ptb-wsj", "layout": layout,
                      "split_rule": ({s: f"sections {v[0]}-{v[-1]}" for s, v in WSJ_SPLITS.items()}
                                     if layout == "sections"
                                     else {s: f"wsj_{lo:04d}" + (f"-{hi:04d}" if hi else " and above")
                                           for s, (lo, hi) in SAMPLE_SPLITS.items()}),
                      "cleaning": "-NONE- and emptied constituents removed, function tags and indices cut",
                      "splits": {}}
    for split, paths in files.items():
        trees[split], words, dropped = [], 0, 0
        for p in paths:
            t, w, d = _clean_trees(p)
            trees[split] += t
            words, dropped = words + w, dropped + d
        if paths:
            manifest["splits"][split] = {"files": len(paths), "first": paths[0].name, "last": paths[-1].name,
                                         "sentences": len(trees[split]), "words": words, "dropped_empty": dropped}
    if not any(trees.values()):
        raise UserError(f"{root}: the .mrg files hold no tree with a word; expected Penn Treebank trees.")
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)     # the manifest always describes a complete set
    for split, lines in trees.items():
        if lines:
            write_lines(out / f"{split}.tree", lines)
        else:
            (out / f"{split}.tree").unlink(missing_ok=True)
    with atomic_writer(out / "manifest.json") as fh:
        fh.write(json.dumps(manifest, indent=2) + "\n")
    return manifest
