"""Build the paper's WMT14 English-German split from files the user downloaded from statmt.org.

Nothing is downloaded here (runs must work offline); the user fetches the archives from
https://www.statmt.org/wmt14/translation-task.html, extracts them anywhere under one directory, and
`prepare_wmt14_en_de` finds the files by name (recursively).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.data.readers import iter_lines, read_parallel, read_sgml
from harness.errors import UserError
from harness.io import atomic_writer


@dataclass(frozen=True)
class Source:
    corpus: str   # name recorded in manifest.json
    en: str       # file name of the English side
    de: str       # file name of the German side
    archive: str  # WMT14 archive the two files come from
    fmt: str      # "text" (one sentence per line) or "sgml" (<seg> elements)


# Training data: the concatenation of these three corpora, in this order (~4.5M pairs, paper §5.1).
TRAIN_SOURCES = (
    Source("europarl-v7", "europarl-v7.de-en.en", "europarl-v7.de-en.de", "training-parallel-europarl-v7.tgz", "text"),
    Source("commoncrawl", "commoncrawl.de-en.en", "commoncrawl.de-en.de", "training-parallel-commoncrawl.tgz", "text"),
    Source("news-commentary-v9", "news-commentary-v9.de-en.en", "news-commentary-v9.de-en.de",
           "training-parallel-nc-v9.tgz", "text"),
)
# Dev = newstest2013 (3000 lines): the plain-text pair if present, else the SGML pair (both are in dev.tgz).
DEV_SOURCES = (
    Source("newstest2013", "newstest2013.en", "newstest2013.de", "dev.tgz", "text"),
    Source("newstest2013", "newstest2013-src.en.sgm", "newstest2013-ref.de.sgm", "dev.tgz", "sgml"),
)
# Test = the FULL newstest2014 (3003 lines), as in the paper, tensor2tensor and fairseq. sacrebleu's `wmt14`
# is the filtered 2737-line set; its `wmt14/full` is this one.
TEST_SOURCES = (
    Source("newstest2014-full", "newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm", "test-full.tgz", "sgml"),
)
EXPECTED_LINES = {"dev": 3000, "test": 3003}

# README-ready summary of the files `prepare_wmt14_en_de` looks for (generated from the tuples above).
WMT14_EN_DE_FILES = "\n".join(
    ["Download from https://www.statmt.org/wmt14/translation-task.html and extract anywhere under one directory:"]
    + [f"- {split}: `{s.en}` + `{s.de}` from `{s.archive}`" + (" (or instead)" if split != "train" and i else "")
       for split, sources in (("train", TRAIN_SOURCES), ("dev", DEV_SOURCES), ("test", TEST_SOURCES))
       for i, s in enumerate(sources)]
)


def _find_files(root: Path, names: set[str]) -> tuple[dict[str, Path], set[str]]:
    """Map each wanted file name to its unique path under root; also return archive names seen (to hint
    that they still need extracting). Follows symlinked directories, guarding against loops."""
    found: dict[str, list[Path]] = {}
    archives: set[str] = set()
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames.sort()
        for name in filenames:
            if name in names:
                found.setdefault(name, []).append(Path(dirpath) / name)
            elif name.endswith((".tgz", ".tar.gz")):
                archives.add(name)
    for name, paths in found.items():
        if len(paths) > 1:
            raise UserError(f"{root}: found {len(paths)} copies of {name} ({', '.join(map(str, paths))}); keep exactly one.")
    return {name: paths[0] for name, paths in found.items()}, archives


def _resolve(root: Path) -> dict[str, list[tuple[Source, Path, Path]]]:
    """Pick the files for every split, or raise one UserError listing everything that is missing."""
    groups = {"train": [(s,) for s in TRAIN_SOURCES], "dev": [DEV_SOURCES], "test": [TEST_SOURCES]}
    wanted = {n for srcs in (TRAIN_SOURCES, DEV_SOURCES, TEST_SOURCES) for s in srcs for n in (s.en, s.de)}
    found, archives = _find_files(root, wanted)
    chosen: dict[str, list[tuple[Source, Path, Path]]] = {"train": [], "dev": [], "test": []}
    missing: list[str] = []
    for split, alternatives_list in groups.items():
        for alternatives in alternatives_list:
            pick = next((s for s in alternatives if s.en in found and s.de in found), None)
            if pick is not None:
                chosen[split].append((pick, found[pick.en], found[pick.de]))
                continue
            first, rest = alternatives[0], alternatives[1:]
            names = " and ".join(n for n in (first.en, first.de) if n not in found)
            alt = "".join(f" or {s.en} and {s.de}" for s in rest)
            hint = ", present but not extracted" if first.archive in archives else ""
            missing.append(f"{names}{alt} (from {first.archive}{hint})")
    if missing:
        raise UserError(
            f"{root}: required WMT14 files not found (searched recursively): {'; '.join(missing)}; "
            "download the archives from https://www.statmt.org/wmt14/translation-task.html and extract them there."
        )
    return chosen


def _count_lines(path: Path) -> int:
    """Line count as `iter_lines` sees it (a last line without "\\n" counts), without decoding."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def _read_pair(src: Source, en: Path, de: Path) -> tuple[list[str], list[str]]:
    if src.fmt == "text":
        return read_parallel(en, de)
    en_lines, de_lines = read_sgml(en), read_sgml(de)
    if len(en_lines) != len(de_lines):
        raise UserError(f"{en} has {len(en_lines)} segments but {de} has {len(de_lines)}; "
                        "source and reference SGML files must have one segment per sentence pair.")
    return en_lines, de_lines


class _HashingWriter:
    """Line writer that also counts lines and hashes the exact bytes written."""

    def __init__(self, handle):
        self.handle, self.sha, self.lines = handle, hashlib.sha256(), 0

    def write(self, line: str) -> None:
        data = line + "\n"
        self.handle.write(data)
        self.sha.update(data.encode("utf-8"))
        self.lines += 1

    def summary(self) -> dict:
        return {"lines": self.lines, "sha256": self.sha.hexdigest()}


def _write_pair(out_dir: Path, stem: str, pairs) -> dict:
    """Stream (en, de) pairs into stem.en / stem.de; an exception mid-stream replaces neither file."""
    with atomic_writer(out_dir / f"{stem}.en") as fe, atomic_writer(out_dir / f"{stem}.de") as fd:
        we, wd = _HashingWriter(fe), _HashingWriter(fd)
        for e, d in pairs:
            we.write(e)
            wd.write(d)
    return {f"{stem}.en": we.summary(), f"{stem}.de": wd.summary()}


def prepare_wmt14_en_de(from_dir: str | os.PathLike, out_dir: str | os.PathLike,
                        max_len_ratio: float | None = None) -> dict:
    """Write out_dir/{train,dev,test}.{en,de} and manifest.json; return the manifest.

    Training pairs with an empty (or whitespace-only) side are dropped. `max_len_ratio` (off by default,
    as the paper states no such filter) also drops pairs whose word-count ratio exceeds it, like Moses'
    clean-corpus-n. Dev and test are never filtered. Every file is written atomically and manifest.json
    last, so a manifest always describes a complete set of outputs.
    """
    root, out = Path(from_dir), Path(out_dir)
    if not root.is_dir():
        raise UserError(f"{root}: not a directory; pass the directory holding the extracted WMT14 archives.")
    if max_len_ratio is not None and not max_len_ratio >= 1:
        raise UserError(f"max_len_ratio={max_len_ratio}: expected a number >= 1 or None (no ratio filter).")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; pass a directory for the prepared data.")
    chosen = _resolve(root)
    out.mkdir(parents=True, exist_ok=True)

    # Dev and test are small: read and validate them before spending minutes on the training data.
    heldout = {split: (*chosen[split][0], _read_pair(*chosen[split][0])) for split in ("dev", "test")}

    manifest: dict = {"from_dir": str(root.resolve()), "pair": "en-de", "sources": {}, "outputs": {},
                      "filters": {"drop_empty": True, "max_len_ratio": max_len_ratio}, "warnings": []}
    train_info = []
    drops = {"empty": 0, "ratio": 0}

    def train_pairs():
        for src, en, de in chosen["train"]:
            info = {"corpus": src.corpus, "archive": src.archive, "en": str(en.relative_to(root)),
                    "de": str(de.relative_to(root)), "lines": 0, "kept": 0}
            train_info.append(info)
            for e, d in itertools.zip_longest(iter_lines(en), iter_lines(de)):
                if e is None or d is None:  # one file ran out first: report both full counts
                    raise UserError(f"{en} has {_count_lines(en)} lines but {de} has {_count_lines(de)}; "
                                    "parallel files must have one line per sentence pair.")
                info["lines"] += 1
                if not e.strip() or not d.strip():
                    drops["empty"] += 1
                    continue
                if max_len_ratio is not None:
                    ne, nd = len(e.split()), len(d.split())
                    if max(ne, nd) > max_len_ratio * min(ne, nd):
                        drops["ratio"] += 1
                        continue
                info["kept"] += 1
                yield e, d

    manifest["outputs"].update(_write_pair(out, "train", train_pairs()))
    manifest["sources"]["train"] = train_info
    manifest["dropped"] = drops

    for split, (src, en, de, (en_lines, de_lines)) in heldout.items():
        manifest["sources"][split] = {"corpus": src.corpus, "archive": src.archive, "format": src.fmt,
                                      "en": str(en.relative_to(root)), "de": str(de.relative_to(root)),
                                      "lines": len(en_lines)}
        if len(en_lines) != EXPECTED_LINES[split]:
            manifest["warnings"].append(f"{split}: {len(en_lines)} lines, the paper's {src.corpus} has "
                                        f"{EXPECTED_LINES[split]}")
        manifest["outputs"].update(_write_pair(out, split, zip(en_lines, de_lines)))

    with atomic_writer(out / "manifest.json") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return manifest
