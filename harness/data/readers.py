"""Line-aligned text and WMT SGML readers, and an atomic line writer.

Every bad input raises `UserError` with one sentence naming the path. Lines are split on "\\n" only
(never `str.splitlines`, which also splits on U+2028, U+0085, form feeds... that occur inside Common
Crawl sentences and would silently break the source/target alignment).
"""

from __future__ import annotations

import gzip
import html
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from harness.errors import UserError
from harness.io import atomic_writer

_BOM = "\ufeff"


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"{path}: file not found; expected an existing UTF-8 text file.")
    if not path.is_file():
        raise UserError(f"{path}: not a regular file; expected a UTF-8 text file.")


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}: line {lineno} is not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the line); "
            "only UTF-8 text is accepted."
        ) from None


def open_binary(path: str | os.PathLike):
    """The file's bytes, decompressed on the fly when its name ends in .gz (Multi30K's raw files, WMT's
    giga-fren), so that a user never has to gunzip a corpus first."""
    path = Path(path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_raw_lines(path: Path) -> Iterator[bytes]:
    """The raw lines of a plain or gzipped file, split on b"\\n" only; a damaged gzip stream is one UserError."""
    try:
        with open_binary(path) as f:  # binary iteration splits on b"\n" only
            yield from f
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise UserError(f"{path}: not a readable gzip file ({e or type(e).__name__}); expected a .gz file as "
                        "gzip writes it, or the text itself without the .gz suffix.") from None


def iter_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a UTF-8 file (plain, or gzipped when its name ends in .gz) without their "\\n" /
    "\\r\\n" ending; streams, so corpora of millions of lines are never held twice. Raises UserError for a
    missing, empty, damaged or non-UTF-8 file."""
    path = Path(path)
    _check_file(path)
    n = 0
    for n, raw in enumerate(iter_raw_lines(path), start=1):
        line = _decode(raw, path, n)
        if n == 1 and line.startswith(_BOM):  # a BOM is valid UTF-8 but not part of the text
            line = line[1:]
        yield line.rstrip("\n").removesuffix("\r")
    if n == 0:
        raise UserError(f"{path}: file is empty; expected at least one line of UTF-8 text.")


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file, trailing newline (and a CR before it) removed, nothing else."""
    return list(iter_lines(path))


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Two line-aligned files; their line counts must match."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
            "parallel files must have one line per sentence pair."
        )
    return src, tgt


# One pass over named and numeric XML entities: a single pass means "&amp;lt;" becomes "&lt;", as an XML
# parser would do. A bare "&" (WMT's SGML is not strict) is left alone.
_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#[0-9]+|#[xX][0-9a-fA-F]+);")
# Segment tags plus the document-level tags a segment must never contain (a sign of a missing </seg>).
_TAG = re.compile(r"<(/?)(seg|doc|p|srcset|refset|tstset)\b([^<>]*)(>?)", re.IGNORECASE)


def _unescape(text: str) -> str:
    return _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)


def read_sgml(path: str | os.PathLike) -> list[str]:
    """Segments of a WMT SGML test set (`<seg id="N">text</seg>`) in document order.

    Entities (&amp; &lt; &gt; &quot; &apos; and numeric ones) are unescaped and whitespace is stripped and
    collapsed to single spaces (as sacrebleu does when it extracts these files; sacrebleu itself does
    *not* unescape entities). Segments may carry any attributes and span lines; nested, unclosed or
    stray `seg` tags raise UserError with the line number.
    """
    path = Path(path)
    text = "\n".join(iter_lines(path))  # validates existence, emptiness and UTF-8 with line numbers

    def malformed(pos: int, what: str) -> UserError:
        line = text.count("\n", 0, pos) + 1
        return UserError(f"{path}: malformed SGML at line {line} ({what}); expected <seg ...>text</seg> elements.")

    segs: list[str] = []
    open_end = None  # end offset of the currently open <seg ...> tag
    for m in _TAG.finditer(text):
        closing, name, complete = m.group(1) == "/", m.group(2).lower(), m.group(4) == ">"
        if name != "seg":
            if open_end is not None:
                raise malformed(m.start(), f"<{m.group(1)}{m.group(2)}> inside an unclosed <seg>")
        elif not complete:
            raise malformed(m.start(), "a seg tag without its closing '>'")
        elif not closing:
            if open_end is not None:
                raise malformed(m.start(), "<seg> opened before the previous one was closed")
            open_end = m.end()
        else:
            if open_end is None:
                raise malformed(m.start(), "</seg> without a matching <seg>")
            segs.append(" ".join(_unescape(text[open_end:m.start()]).split()))
            open_end = None
    if open_end is not None:
        raise malformed(open_end - 1, "<seg> never closed")
    if not segs:
        raise UserError(f"{path}: no <seg> elements found; expected a WMT SGML file such as "
                        "newstest2014-deen-ref.de.sgm.")
    return segs


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write one line per item (UTF-8, "\\n"-terminated) atomically."""
    with atomic_writer(path) as f:
        for i, line in enumerate(lines, start=1):
            if "\n" in line:  # would silently shift every following line
                raise UserError(f"{path}: item {i} contains a newline; each item must be a single line of text.")
            f.write(line + "\n")
