"""Build the paper's WMT14 English-German and English-French splits from files the user downloaded.

Nothing is downloaded here (runs must work offline); the user fetches the archives from
https://www.statmt.org/wmt14/translation-task.html, extracts them anywhere under one directory, and
`prepare_wmt14` finds the files by name (recursively). The two pairs share every step (finding, checking,
filtering, writing); a `WmtPair` table names each pair's files, and `prepare_wmt14_en_de` /
`prepare_wmt14_en_fr` are that core with their table.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.data.readers import iter_lines, iter_raw_lines, read_parallel, read_sgml
from harness.errors import UserError
from harness.io import atomic_writer


@dataclass(frozen=True)
class Source:
    corpus: str   # name recorded in manifest.json
    en: str       # file name of the English side
    tgt: str      # file name of the other side (German or French)
    archive: str  # WMT archive the two files come from
    fmt: str      # "text" (one sentence per line) or "sgml" (<seg> elements)


@dataclass(frozen=True)
class WmtPair:
    """One language pair's file table and the paper's settings for it (§5.1)."""
    name: str                      # "en-de": recorded in manifest.json, and `data prepare wmt14-<name>`
    tgt: str                       # the target language code: output files are {split}.en / {split}.<tgt>
    train: tuple[Source, ...]      # concatenated, in this order
    dev: tuple[Source, ...]        # alternatives: the first one whose two files are present
    test: tuple[Source, ...]       # alternatives, likewise
    vocab_size: int                # §5.1: the shared vocabulary the paper used for this pair
    paper_train_pairs: int         # §5.1: training pairs the paper reports (recorded, never enforced)
    expected_lines: tuple[tuple[str, int], ...] = (("dev", 3000), ("test", 3003))


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
    Source("newstest2014-full", "newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm", "test-full.tgz",
           "sgml"),
)
EXPECTED_LINES = {"dev": 3000, "test": 3003}

EN_DE = WmtPair("en-de", "de", TRAIN_SOURCES, DEV_SOURCES, TEST_SOURCES, vocab_size=37000,
                paper_train_pairs=4_500_000)

# EN-FR (§5.1: "36M sentences", a 32000 word-piece vocabulary). The training corpora and their file names
# are those of the reference implementations: tensor2tensor's data_generators/translate_enfr.py
# (_ENFR_TRAIN_LARGE_DATA) and fairseq's examples/translation/prepare-wmt14en2fr.sh (CORPORA): Europarl v7,
# Common Crawl, the UN corpus, News Commentary v9 and the 10^9 French-English corpus, in fairseq's order.
# Giga-fren ships gzipped inside its .tar (training-giga-fren.tar holds giga-fren.release2.fixed.{en,fr}.gz):
# a text file is read gzipped when only NAME.gz is there (fairseq's script gunzips them; here nobody has to).
EN_FR_TRAIN_SOURCES = (
    Source("europarl-v7", "europarl-v7.fr-en.en", "europarl-v7.fr-en.fr", "training-parallel-europarl-v7.tgz", "text"),
    Source("commoncrawl", "commoncrawl.fr-en.en", "commoncrawl.fr-en.fr", "training-parallel-commoncrawl.tgz", "text"),
    Source("un", "undoc.2000.fr-en.en", "undoc.2000.fr-en.fr", "training-parallel-un.tgz", "text"),
    Source("news-commentary-v9", "news-commentary-v9.fr-en.en", "news-commentary-v9.fr-en.fr",
           "training-parallel-nc-v9.tgz", "text"),
    Source("giga-fren", "giga-fren.release2.fixed.en", "giga-fren.release2.fixed.fr", "training-giga-fren.tar", "text"),
)
# Dev = newstest2013 (3000 lines), as tensor2tensor, the authors' code, uses for EN-FR
# (translate_enfr.py: _ENFR_TEST_LARGE_DATA = dev/newstest2013.en, dev/newstest2013.fr from dev.tgz) and as the
# paper uses for EN-DE. (fairseq's prepare-wmt14en2fr.sh holds out every 1333rd training line as its valid
# set instead; the paper names no EN-FR dev set.) Plain text if present, else the SGML pair; both in dev.tgz.
EN_FR_DEV_SOURCES = (
    Source("newstest2013", "newstest2013.en", "newstest2013.fr", "dev.tgz", "text"),
    Source("newstest2013", "newstest2013-src.en.sgm", "newstest2013-ref.fr.sgm", "dev.tgz", "sgml"),
)
# Test = the full newstest2014 EN-FR (3003 lines), the file fairseq's script reads from test-full.tgz.
EN_FR_TEST_SOURCES = (
    Source("newstest2014-full", "newstest2014-fren-src.en.sgm", "newstest2014-fren-ref.fr.sgm", "test-full.tgz",
           "sgml"),
)
EN_FR = WmtPair("en-fr", "fr", EN_FR_TRAIN_SOURCES, EN_FR_DEV_SOURCES, EN_FR_TEST_SOURCES, vocab_size=32000,
                paper_train_pairs=36_000_000)

# `data prepare NAME`: the corpora it knows.
PAIRS = {"wmt14-en-de": EN_DE, "wmt14-en-fr": EN_FR}


def files_doc(pair: WmtPair) -> str:
    """README-ready list of the files `prepare_wmt14` looks for, generated from the pair's table."""
    return "\n".join(
        ["Download from https://www.statmt.org/wmt14/translation-task.html and extract anywhere under one directory:"]
        + [f"- {split}: `{s.en}` + `{s.tgt}` from `{s.archive}`" + (" (or instead)" if split != "train" and i else "")
           for split, sources in (("train", pair.train), ("dev", pair.dev), ("test", pair.test))
           for i, s in enumerate(sources)]
    )


WMT14_EN_DE_FILES = files_doc(EN_DE)
WMT14_EN_FR_FILES = files_doc(EN_FR)


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
            elif name.endswith((".tgz", ".tar.gz", ".tar", ".gz")):
                archives.add(name)
    for name, paths in found.items():
        if len(paths) > 1:
            raise UserError(f"{root}: found {len(paths)} copies of {name} ({', '.join(map(str, paths))}); keep "
                            "exactly one.")
    return {name: paths[0] for name, paths in found.items()}, archives


def _resolve(root: Path, pair: WmtPair) -> dict[str, list[tuple[Source, Path, Path]]]:
    """Pick the files for every split, or raise one UserError listing everything that is missing."""
    groups = {"train": [(s,) for s in pair.train], "dev": [pair.dev], "test": [pair.test]}
    text = {n for srcs in (pair.train, pair.dev, pair.test) for s in srcs if s.fmt == "text" for n in (s.en, s.tgt)}
    wanted = {n for srcs in (pair.train, pair.dev, pair.test) for s in srcs for n in (s.en, s.tgt)}
    found, archives = _find_files(root, wanted | {f"{n}.gz" for n in text})
    for name in text:      # a text file still gzipped (giga-fren as its .tar holds it) is read as it is
        if name not in found and f"{name}.gz" in found:
            found[name] = found.pop(f"{name}.gz")
    chosen: dict[str, list[tuple[Source, Path, Path]]] = {"train": [], "dev": [], "test": []}
    missing: list[str] = []
    for split, alternatives_list in groups.items():
        for alternatives in alternatives_list:
            pick = next((s for s in alternatives if s.en in found and s.tgt in found), None)
            if pick is not None:
                chosen[split].append((pick, found[pick.en], found[pick.tgt]))
                continue
            first, rest = alternatives[0], alternatives[1:]
            absent = [n for n in (first.en, first.tgt) if n not in found]
            alt = "".join(f" or {s.en} and {s.tgt}" for s in rest)
            if first.archive in archives:
                hint = ", present but not extracted"
            else:
                hint = ""
            missing.append(f"{' and '.join(absent)}{alt} (from {first.archive}{hint})")
    if missing:
        raise UserError(
            f"{root}: required WMT14 files not found for {pair.name} (searched recursively): {'; '.join(missing)}; "
            "download the archives from https://www.statmt.org/wmt14/translation-task.html and extract them there."
        )
    return chosen


def _count_lines(path: Path) -> int:
    """Line count as `iter_lines` sees it (a last line without "\\n" counts), without decoding."""
    n = 0
    for n, _ in enumerate(iter_raw_lines(path), start=1):   # a last line without "\\n" is a line too
        pass
    return n


def _read_pair(src: Source, en: Path, tgt: Path) -> tuple[list[str], list[str]]:
    if src.fmt == "text":
        return read_parallel(en, tgt)
    en_lines, tgt_lines = read_sgml(en), read_sgml(tgt)
    if len(en_lines) != len(tgt_lines):
        raise UserError(f"{en} has {len(en_lines)} segments but {tgt} has {len(tgt_lines)}; "
                        "source and reference SGML files must have one segment per sentence pair.")
    return en_lines, tgt_lines


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


def _write_pair(out_dir: Path, stem: str, tgt: str, pairs) -> dict:
    """Stream (en, tgt) pairs into stem.en / stem.<tgt>; an exception mid-stream replaces neither file."""
    with atomic_writer(out_dir / f"{stem}.en") as fe, atomic_writer(out_dir / f"{stem}.{tgt}") as ft:
        we, wt = _HashingWriter(fe), _HashingWriter(ft)
        for e, t in pairs:
            we.write(e)
            wt.write(t)
    return {f"{stem}.en": we.summary(), f"{stem}.{tgt}": wt.summary()}


def prepare_wmt14(pair: WmtPair, from_dir: str | os.PathLike, out_dir: str | os.PathLike,
                  max_len_ratio: float | None = None) -> dict:
    """Write out_dir/{train,dev,test}.{en,<pair.tgt>} and manifest.json; return the manifest.

    Training pairs with an empty (or whitespace-only) side are dropped. `max_len_ratio` (off by default,
    as the paper states no such filter) also drops pairs whose word-count ratio exceeds it, like Moses'
    clean-corpus-n. Dev and test are never filtered. Every file is written atomically and manifest.json
    last, so a manifest always describes a complete set of outputs. The manifest records the pair and the
    paper's vocabulary size for it; the shared BPE model itself is trained when a run reads the directory
    (harness/data/bpe.py, with the run's model.vocab_size), as for every data directory.
    """
    root, out = Path(from_dir), Path(out_dir)
    if not root.is_dir():
        raise UserError(f"{root}: not a directory; pass the directory holding the extracted WMT14 archives.")
    if max_len_ratio is not None and not max_len_ratio >= 1:
        raise UserError(f"max_len_ratio={max_len_ratio}: expected a number >= 1 or None (no ratio filter).")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; pass a directory for the prepared data.")
    chosen = _resolve(root, pair)
    out.mkdir(parents=True, exist_ok=True)

    # Dev and test are small: read and validate them before spending minutes on the training data.
    heldout = {split: (*chosen[split][0], _read_pair(*chosen[split][0])) for split in ("dev", "test")}

    manifest: dict = {"from_dir": str(root.resolve()), "pair": pair.name, "sources": {}, "outputs": {},
                      "filters": {"drop_empty": True, "max_len_ratio": max_len_ratio}, "warnings": [],
                      "paper": {"vocab_size": pair.vocab_size, "train_pairs": pair.paper_train_pairs}}
    train_info = []
    drops = {"empty": 0, "ratio": 0}
    t = pair.tgt

    def train_pairs():
        for src, en, tg in chosen["train"]:
            info = {"corpus": src.corpus, "archive": src.archive, "en": str(en.relative_to(root)),
                    t: str(tg.relative_to(root)), "lines": 0, "kept": 0}
            train_info.append(info)
            for e, d in itertools.zip_longest(iter_lines(en), iter_lines(tg)):
                if e is None or d is None:  # one file ran out first: report both full counts
                    raise UserError(f"{en} has {_count_lines(en)} lines but {tg} has {_count_lines(tg)}; "
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

    manifest["outputs"].update(_write_pair(out, "train", t, train_pairs()))
    manifest["sources"]["train"] = train_info
    manifest["dropped"] = drops

    expected = dict(pair.expected_lines)
    for split, (src, en, tg, (en_lines, tgt_lines)) in heldout.items():
        manifest["sources"][split] = {"corpus": src.corpus, "archive": src.archive, "format": src.fmt,
                                      "en": str(en.relative_to(root)), t: str(tg.relative_to(root)),
                                      "lines": len(en_lines)}
        if len(en_lines) != expected[split]:
            manifest["warnings"].append(f"{split}: {len(en_lines)} lines, the paper's {src.corpus} has "
                                        f"{expected[split]}")
        manifest["outputs"].update(_write_pair(out, split, t, zip(en_lines, tgt_lines)))

    with atomic_writer(out / "manifest.json") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return manifest


def prepare_wmt14_en_de(from_dir: str | os.PathLike, out_dir: str | os.PathLike,
                        max_len_ratio: float | None = None) -> dict:
    """WMT14 English-German (§5.1: about 4.5 M pairs, newstest2013 dev, newstest2014 test): `prepare_wmt14`."""
    return prepare_wmt14(EN_DE, from_dir, out_dir, max_len_ratio)


def prepare_wmt14_en_fr(from_dir: str | os.PathLike, out_dir: str | os.PathLike,
                        max_len_ratio: float | None = None) -> dict:
    """WMT14 English-French (§5.1: 36 M sentences, a 32000 word-piece vocabulary): `prepare_wmt14`."""
    return prepare_wmt14(EN_FR, from_dir, out_dir, max_len_ratio)
