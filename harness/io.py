"""Files that are either whole or absent: every write of a result, report or corpus goes through here.

A temp file in the target's directory, renamed over the final name only once it is complete, so that a
crash, a kill or a full disk mid-write never leaves half a file under the name a reader looks for.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

import yaml

from harness.errors import UserError


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """A handle to a temp file beside `path` (UTF-8 text with "\\n" line ends, or bytes), renamed over
    `path` only when the block ends without an exception. The file is readable by everyone (0644)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{path}: parent directory {path.parent} does not exist; create it or choose another output "
                        "path.")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)                   # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `path` whole or not at all; returns the path."""
    with atomic_writer(path, binary=True) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike, marker: str = "manifest.json") -> Iterator[Path]:
    """A fresh directory beside `out` (readable by everyone) to fill; renamed to `out` when the block ends
    without an exception, and removed otherwise. `out` may exist empty. If another process completed `out`
    first (its `marker` file is there), theirs is kept and ours dropped: the caller then reads `out`."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)                          # mkdtemp makes it private
    try:
        yield tmp
        try:
            try:
                if out.is_dir() and not any(out.iterdir()):
                    out.rmdir()               # renaming onto a directory is not portable
            except FileNotFoundError:         # another process removed the empty `out` first, to rename onto it
                pass
            os.rename(tmp, out)
        except OSError:
            if not (out / marker).is_file():  # not someone else's finished copy: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def check_writable(path: Path, what: str, advice: str, keep: bool = True) -> None:
    """Create `path` if needed and write a file in it, or raise one sentence; keep=False removes a directory
    this check created (the caller only wanted to know)."""
    existed = path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A probe of its own: the ranks of a torchrun job check the same directory at the same moment.
        fd, probe = tempfile.mkstemp(prefix=".write_test-", dir=path)
        os.close(fd)
        os.unlink(probe)
        if not keep and not existed:
            path.rmdir()
    except OSError as err:
        raise UserError(f"{what} {path} cannot be written ({err.strerror or type(err).__name__}); "
                        f"{advice}.") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping holding one key twice: PyYAML keeps the last silently, so two
    `C5:` rows in a study file would run one of them without a word."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} appears twice in one mapping (line {seen[key] + 1} and line "
                f"{key_node.start_mark.line + 1})", None)              # no mark: the message names both lines
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str):
    """yaml.safe_load, refusing duplicate keys (a yaml.YAMLError naming the key and both lines)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)      # noqa: S506 - a SafeLoader subclass: plain data only
