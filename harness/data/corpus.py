"""From a data name to encoded train/dev/test sets: the made-up corpus (generated once and cached) or a
directory of plain parallel text (e.g. what `python -m harness data prepare wmt14-en-de` writes)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from harness.data.batching import ParallelData
from harness.data.bpe import Tokenizer, train_bpe
from harness.data.parse import SUBTREE_MARK, parse_symbols, prepare_parse_corpus
from harness.data.readers import read_parallel
from harness.data.sources import SOURCES
from harness.data.synth.config import SynthConfig
from harness.errors import UserError

# File name pairs a data directory may use, in order of preference: the made-up corpus, then what
# `data prepare wmt14-en-de` and `wmt14-en-fr` write.
_SUFFIXES = (("src", "tgt"), ("en", "de"), ("en", "fr"))


SYNTH = SynthConfig()     # the made-up corpus's grammar at its defaults


@dataclass(frozen=True)
class DataConfig:
    name: str = "synth"            # "synth" (the made-up corpus) or a directory with train/dev/test files
    task: Literal["translate", "parse"] = "translate"   # parse: sentence -> linearized tree (Table 4)
    train_pairs: int = 50_000      # synth only: training pairs generated
    dev_pairs: int = 1000          # synth only: dev pairs generated
    test_pairs: int = 1000         # synth only: test pairs generated
    seed: int = 1                  # synth only: the seed of the generated sentences (lexicon_seed: of the words)
    lexicon_scale: float = 1.0     # synth only: multiplies the lexicon's sizes (1.0: 5,000 lemmas)
    # synth only, the grammar's own defaults (harness/data/synth/config.py SynthConfig):
    max_depth: int = SYNTH.max_depth   # how deep clauses, PPs and coordinations nest (1..8)
    max_words: int = SYNTH.max_len     # longest source sentence in words, final "." included
    target: str = SYNTH.target         # the target language, "de" (German-like) or "fr" (French-like)
    lexicon_seed: int = 0          # synth only: the made-up words' spellings and features (another vocabulary)
    # DEVIATION (parse only; default False, Vinyals et al.'s XX, which the paper follows): each word of a
    # linearized tree is written with its POS tag, XX/NN instead of XX, so that the target asks for each
    # word's category and the model must read the source to give it (studies/table4.yaml, wsj-sample).
    parse_tags: bool = False
    # DEVIATION (parse only; default 0, the paper's whole sentences only): also train on every phrase below a
    # training tree's root that spans at least this many words, as a pair of its own (the phrase's words ->
    # its linearized subtree). Dev and test stay whole sentences (studies/table4.yaml, wsj-sample).
    parse_subtrees: int = 0
    cache_dir: str = "data"        # generated corpora and BPE models are cached here

    # Added after studies had run without them: left out of a trial's config hash at their defaults
    # (harness/trial.py), so that those trials keep their hashes.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("target", "lexicon_seed", "parse_tags", "parse_subtrees")
    # What only the made-up corpus reads: a prepared directory (`name` a path) has its own sentences.
    SYNTH_ONLY: ClassVar[tuple[str, ...]] = ("train_pairs", "dev_pairs", "test_pairs", "seed", "lexicon_scale",
                                             "max_depth", "max_words", "lexicon_seed")


@dataclass
class Split:
    src_text: list[str]
    tgt_text: list[str]
    data: ParallelData
    trees: list[str] | None = None     # task parse: the gold tree of each pair, as read


@dataclass
class Dataset:
    tokenizer: Tokenizer
    train: Split
    dev: Split
    test: Split
    root: Path
    info: dict = field(default_factory=dict)
    # The target side's language, for the paper's tokenized BLEU (Moses `tokenizer.perl -l LANG`): the
    # suffix of a prepared WMT directory's files (train.de, train.fr); for the made-up corpus's .tgt, its
    # `target` (the French-like target's elisions, "l'ami", are what `-l fr` splits).
    tgt_lang: str = "de"


def corpus_dir(cfg: DataConfig) -> Path:
    """Where the text files are: generated on demand for synth, the user's directory otherwise; for the
    parsing task, the sentence/linearized-tree pairs derived from either (harness/data/parse.py)."""
    source = SOURCES.get(cfg.name)
    generated = source.generate(cfg) if source is not None and source.generate is not None else None
    if cfg.task == "parse":
        return prepare_parse_corpus(cfg, generated)
    if generated is not None:
        return generated
    root = Path(cfg.name)
    if not root.is_dir():
        generated = [name for name, s in SOURCES.items() if s.generate is not None]
        raise UserError(f"data {cfg.name!r} is neither {' nor '.join(map(repr, generated))} nor an existing "
                        "directory; give one of those or a directory holding train/dev/test files (e.g. from "
                        "`python -m harness data prepare`).")
    return root


def split_paths(root: Path, split: str) -> tuple[Path, Path]:
    """The (source, target) files of one split of a data directory: SPLIT.src/.tgt, SPLIT.en/.de or
    SPLIT.en/.fr (a named extra test set, e.g. Multi30K's test_2017_flickr, as well as train/dev/test)."""
    for a, b in _SUFFIXES:
        if (root / f"{split}.{a}").is_file() and (root / f"{split}.{b}").is_file():
            return root / f"{split}.{a}", root / f"{split}.{b}"
    raise UserError(f"data directory {root} has no {split}.src/{split}.tgt, {split}.en/{split}.de or "
                    f"{split}.en/{split}.fr pair; "
                    "it needs train, dev and test files with one sentence a line.")


TOKENIZED_FORM = "lc.norm.tok"      # Multi30K's lowercased, normalised, tokenized form (data/multi30k.py)


def text_form(root: Path) -> str:
    """The form a prepared directory's text is in, as its manifest says: "raw" (as released; also generated
    corpora and directories without a manifest) or "lc.norm.tok"."""
    try:
        return str(json.loads((Path(root) / "manifest.json").read_text(encoding="utf-8")).get("form", "raw"))
    except (OSError, ValueError, AttributeError):
        return "raw"


def _checked_texts_and_tokenizer(cfg: DataConfig, vocab_size: int):
    root = corpus_dir(cfg)
    paths = {split: split_paths(root, split) for split in ("train", "dev", "test")}
    # Read (and so check: UTF-8, equal line counts, not empty) every file before any work is done.
    texts = {split: read_parallel(*paths[split]) for split in paths}
    symbols: tuple[str, ...] = ()
    if cfg.task == "parse":
        symbols = parse_symbols(texts["train"][1])
    tokenizer = Tokenizer(train_bpe(list(paths["train"]), vocab_size, Path(cfg.cache_dir).resolve() / "bpe", symbols))
    return root, texts, tokenizer


def prepare_data(cfg: DataConfig, vocab_size: int) -> None:
    """Generate (synth), check and train the BPE model once, so that parallel trials only read caches."""
    _checked_texts_and_tokenizer(cfg, vocab_size)


def load_dataset(cfg: DataConfig, vocab_size: int, max_len: int | None = None) -> Dataset:
    root, texts, tokenizer = _checked_texts_and_tokenizer(cfg, vocab_size)
    splits = {}
    for split, (src, tgt) in texts.items():
        # Training pairs longer than the model's position table are dropped; dev/test ones are cut to fit.
        data = ParallelData(tokenizer.encode(src), tokenizer.encode(tgt), max_len, truncate=split != "train")
        trees = None
        if cfg.task == "parse":
            trees = (root / f"{split}.tree").read_text(encoding="utf-8").splitlines()
        splits[split] = Split(src, tgt, data, trees)
    tgt_suffix = split_paths(root, "train")[1].suffix.lstrip(".")
    tgt_lang = tgt_suffix if tgt_suffix in ("de", "fr") else cfg.target
    info = {"root": str(root), "bpe_model": str(tokenizer.path), "vocab_size": tokenizer.vocab_size,
            "tgt_lang": tgt_lang, "form": text_form(root),
            **{f"{s}_pairs": len(splits[s].data) for s in splits},
            **{f"{s}_truncated": splits[s].data.truncated for s in ("dev", "test")}}
    if cfg.task == "parse":
        # Whole training trees among the pairs kept (data.parse_subtrees adds phrases of them as pairs too)
        train = splits["train"]
        kept = train.data.kept if train.data.kept is not None else range(len(train.trees))
        info["train_trees"] = sum(1 for i in kept if not train.trees[i].startswith(SUBTREE_MARK))
    return Dataset(tokenizer, splits["train"], splits["dev"], splits["test"], root, info, tgt_lang)
