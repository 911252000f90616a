"""One shared sentencepiece BPE model over source and target (§5.1: a shared vocabulary of about 37000).

Models are cached by a hash of the training text and the settings, so a study's rows share one vocabulary.
Special ids are fixed for the model core: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import sentencepiece as spm

from harness.data.trees import is_word_token
from harness.errors import UserError
from harness.io import atomic_write

PAD, UNK, BOS, EOS = 0, 1, 2, 3
# Lines sampled for training the BPE merges: plenty for a stable vocabulary, bounded time on big corpora.
MAX_TRAINING_LINES = 2_000_000


def _content_hash(paths: list[Path], vocab_size: int, symbols: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(f"bpe-v1|{vocab_size}|{MAX_TRAINING_LINES}".encode())
    if symbols:
        h.update(("symbols|" + "\0".join(symbols)).encode())
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _lines(paths: list[Path]):
    # Interleave the files so that a capped sample sees source and target alike.
    handles = [open(p, encoding="utf-8") for p in paths]
    try:
        n = 0
        while handles and n < MAX_TRAINING_LINES:
            for f in list(handles):
                line = f.readline()
                if not line:
                    handles.remove(f)
                    continue
                n += 1
                yield line.rstrip("\n")
    finally:
        for f in handles:
            f.close()


def train_bpe(paths: list[str | Path], vocab_size: int, cache_dir: str | Path, symbols: tuple[str, ...] = ()) -> Path:
    """Train (or reuse) the shared BPE model for these text files; returns the path of the .model file.
    `symbols` are whole words that must each be one piece (the parsing targets' brackets and XX, as
    Vinyals et al. 2015 treat them); sentencepiece then never splits "(NP" into "(" and "NP"."""
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.is_file():
            raise UserError(f"BPE training file {p} does not exist; give existing source and target text files.")
    if vocab_size < 8:
        raise UserError(f"BPE vocabulary size {vocab_size} is too small; use at least 8 (the paper: 37000).")
    cache_dir = Path(cache_dir)
    target = cache_dir / f"bpe-{vocab_size}-{_content_hash(paths, vocab_size, tuple(symbols))}.model"
    if target.is_file():
        return target
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_lines(paths), model_writer=buf, model_type="bpe", vocab_size=vocab_size,
            character_coverage=1.0, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, minloglevel=2,
            # A small corpus may not hold vocab_size pieces; take what it has rather than fail.
            hard_vocab_limit=False, num_threads=os.cpu_count() or 1, max_sentence_length=16384,
            # With the word-boundary mark in front, each symbol is one piece where it stands as a word.
            **({"user_defined_symbols": ["\u2581" + w for w in symbols]} if symbols else {}))
    except RuntimeError as err:
        raise UserError(f"sentencepiece could not train a {vocab_size}-piece BPE model on "
                        f"{', '.join(map(str, paths))}: {err}") from None
    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(target, buf.getvalue())
    return target


class Tokenizer:
    """The shared BPE model: text <-> ids, with the core's special ids."""

    def __init__(self, model_path: str | Path):
        self.path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        assert (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) == (PAD, UNK, BOS, EOS)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self.sp.encode(lines, out_type=int, num_threads=os.cpu_count() or 1)

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids)

    def word_marks(self) -> tuple[list[int], list[int]]:
        """For a model with word positions: the ids of the pieces that begin a word (sentencepiece marks them
        with U+2581), EOS among them, and the ids of the parsing targets' word symbols (XX or XX/TAG)."""
        pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        starts = [i for i, p in enumerate(pieces) if p.startswith("\u2581")] + [EOS]
        words = [i for i, p in enumerate(pieces) if p.startswith("\u2581") and is_word_token(p[1:])]
        if not words:
            raise UserError(f"word_positions needs the word symbol XX as one piece of {self.path}; it is a setting "
                            "for parsing (data.task parse), whose targets hold one XX per word.")
        return starts, words
