"""Multi30K task 1 (Elliott et al. 2016, 2017): English image descriptions with German and French
translations, prepared from the raw files of the dataset's repository (`multi30k/dataset`,
`data/task1/raw/`), gzipped or not.

    python -m harness data prepare multi30k --from DIR --pair en-de --out data/multi30k-en-de

Splits, as the multimodal-MT literature uses them: train (29,000 pairs), dev = val (1,014), test =
test_2016_flickr (1,000). Every further test set found beside them (test_2017_flickr; test_2017_mscoco and
test_2018_flickr where the user has them) is written under its own name, e.g. test_2017_flickr.en / .de,
and `python -m harness evaluate RUN --data DIR --split test_2017_flickr` scores a run on it.

By default nothing is tokenized or lowercased here: runs see the raw text, score sacreBLEU on it, and score
the literature's tokenized lowercased BLEU themselves (harness/eval/bleu.py `tokenized_lc_bleu`). With
`--form lc.norm.tok` every split is written in the form the multimodal-MT literature trains on (the dataset's
`data/task1/tok/*.lc.norm.tok.*`: lowercased, punctuation normalised, Moses-tokenized; harness/eval/bleu.py
`lc_norm_tok`, equal to the dataset's own files line for line), and runs on it are scored on that form.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.data.readers import read_parallel, write_lines
from harness.errors import UserError
from harness.io import atomic_writer

# The files' stems in the repository, the split each becomes, and its size in the released data.
SPLITS = (("train", "train", 29_000), ("val", "dev", 1_014), ("test_2016_flickr", "test", 1_000))
# Further test sets of task 1 (written under their own names when present): sizes as released.
EXTRA_TEST_LINES = {"test_2017_flickr": 1_000, "test_2017_mscoco": 461, "test_2018_flickr": 1_071}
PAIRS = ("en-de", "en-fr")
FORMS = ("raw", "lc.norm.tok")     # the text as released, or the literature's lowercased tokenized form
_EXTRA = re.compile(r"^(test_[0-9]{4}_[a-z]+)\.en(\.gz)?$")


@dataclass(frozen=True)
class _Found:
    stem: str        # the repository's name: train, val, test_2016_flickr, test_2017_flickr, ...
    split: str       # the name written: train, dev, test, test_2017_flickr, ...
    en: Path
    tgt: Path


def _one(root: Path, stem: str, lang: str) -> Path | None:
    """root/stem.lang or root/stem.lang.gz (one of them), or None."""
    plain, gz = root / f"{stem}.{lang}", root / f"{stem}.{lang}.gz"
    if plain.is_file() and gz.is_file():
        raise UserError(f"{root}: both {plain.name} and {gz.name} are there; keep one of them.")
    return plain if plain.is_file() else gz if gz.is_file() else None


def _raw_dir(root: Path) -> Path:
    """The folder holding the raw files: DIR itself, or DIR/data/task1/raw of a clone of the repository."""
    for cand in (root, root / "data" / "task1" / "raw", root / "task1" / "raw", root / "raw"):
        if cand.is_dir() and _one(cand, "train", "en") is not None:
            return cand
    raise UserError(f"{root}: no train.en.gz (or train.en) found there or in data/task1/raw/; pass the folder "
                    "holding Multi30K task 1's raw files (train, val, test_2016_flickr .en/.de/.fr, gzipped or "
                    "not), as the dataset's repository has them under data/task1/raw/.")


def find_files(root: Path, tgt: str) -> list[_Found]:
    """The required splits (all of them, or one UserError naming every missing file), then the extra test sets."""
    raw = _raw_dir(root)
    found, missing = [], []
    for stem, split, _ in SPLITS:
        en, tg = _one(raw, stem, "en"), _one(raw, stem, tgt)
        missing += [f"{stem}.{lang}.gz" for lang, p in (("en", en), (tgt, tg)) if p is None]
        if en and tg:
            found.append(_Found(stem, split, en, tg))
    if missing:
        raise UserError(f"{raw}: Multi30K files missing for en-{tgt}: {', '.join(missing)} (or the same without "
                        ".gz); the dataset's repository has them under data/task1/raw/.")
    for name in sorted(os.listdir(raw)):
        m = _EXTRA.match(name)
        if m and m.group(1) != "test_2016_flickr" and not (m.group(2) and (raw / name[:-3]).is_file()):
            tg = _one(raw, m.group(1), tgt)
            if tg is not None:       # e.g. test_2017_mscoco has no French in some releases: skipped, not an error
                found.append(_Found(m.group(1), m.group(1), _one(raw, m.group(1), "en"), tg))
    return found


def prepare_multi30k(from_dir: str | os.PathLike, out_dir: str | os.PathLike, pair: str = "en-de",
                     form: str = "raw", tokenize: Callable[[str, str], str] | None = None) -> dict:
    """Write out_dir/{train,dev,test}.{en,<tgt>}, every extra test set found as <name>.{en,<tgt>}, and
    manifest.json; return the manifest. Every file is read and checked (UTF-8, not empty, the two sides
    line for line, no empty line) before anything is written: a bad input writes nothing and leaves a
    previous output as it was. form "lc.norm.tok" writes every line as tokenize(line, lang) gives it (the
    caller passes harness/eval/bleu.py's lc_norm_tok); the manifest records the form."""
    if pair not in PAIRS:
        raise UserError(f"--pair {pair!r} is not a Multi30K task 1 pair; use one of {', '.join(PAIRS)}.")
    if form not in FORMS or (form != "raw" and tokenize is None):
        raise UserError(f"--form {form!r} is not a form of Multi30K's text; use one of {', '.join(FORMS)}.")
    root, out = Path(from_dir), Path(out_dir)
    if not root.is_dir():
        raise UserError(f"{root}: not a directory; pass the folder holding Multi30K's raw files "
                        "(data/task1/raw/ of the dataset's repository).")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; pass a directory for the prepared data.")
    tgt = pair.split("-")[1]
    files = find_files(root, tgt)
    texts, manifest = {}, {"from_dir": str(root.resolve()), "dataset": "multi30k-task1", "pair": pair,
                           "form": form, "splits": {}, "warnings": []}
    expected = {stem: n for stem, _, n in SPLITS} | EXTRA_TEST_LINES
    for f in files:
        en, tg = read_parallel(f.en, f.tgt)
        for side, lines, path in (("en", en, f.en), (tgt, tg, f.tgt)):
            blank = next((i for i, line in enumerate(lines, 1) if not line.strip()), None)
            if blank is not None:
                raise UserError(f"{path}: line {blank} is empty; every line of Multi30K is one description, "
                                "aligned line for line with the other language's file.")
        if form != "raw":
            en, tg = [tokenize(line, "en") for line in en], [tokenize(line, tgt) for line in tg]
        texts[f.split] = (en, tg)
        manifest["splits"][f.split] = {"from": [str(f.en.relative_to(root)), str(f.tgt.relative_to(root))],
                                       "lines": len(en), "words_en": sum(len(s.split()) for s in en),
                                       f"words_{tgt}": sum(len(s.split()) for s in tg)}
        if f.stem in expected and len(en) != expected[f.stem]:
            manifest["warnings"].append(f"{f.stem}: {len(en)} lines, the released file has {expected[f.stem]}")
    # Everything is read and checked: now write, each file whole (readers.write_lines) and the manifest last, so
    # that a manifest always describes a complete set (an older manifest goes first).
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)
    for split, (en, tg) in texts.items():
        write_lines(out / f"{split}.en", en)
        write_lines(out / f"{split}.{tgt}", tg)
    with atomic_writer(out / "manifest.json") as fh:
        fh.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest
