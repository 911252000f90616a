"""Table 4's data: the parsing corpus (§6.3; Vinyals et al. 2015, "Grammar as a Foreign Language"), a
sentence's words as the source and its tree linearized depth-first with words as XX as the target.

Tree sources (the data name of a study row with `task: parse`):
  synth      the made-up grammar's gold trees (the same generator, and the same cached corpus, as the
             translation task: train.tree / dev.tree / test.tree beside train.src ...);
  DIRECTORY  the user's Penn Treebank: either WSJ sections as directories 00..24 of .mrg files (sections
             02-21 train, 22 dev, 23 test, the standard split) or files train.tree, dev.tree, test.tree
             (one tree a line or .mrg style).
Training targets are cleaned as usual for this task: empty elements (-NONE- and the constituents left
without words) removed, function tags and indices cut (NP-SBJ-1 -> NP); the PTB's empty root bracket is
dropped. Gold trees for scoring are kept as read: EVALB (harness/eval/evalb.py, COLLINS.prm) deletes
what it deletes itself. Scoring is harness/eval/parse.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from harness.data.trees import Tree, is_word_token, linearize, parse_tree, read_tree_texts, unwrap_root
from harness.errors import UserError
from harness.io import atomic_dir

WSJ_SPLITS = {"train": [f"{s:02d}" for s in range(2, 22)], "dev": ["22"], "test": ["23"]}
PARSE_VERSION = 1          # bump when the cleaning or linearization changes: cached corpora are rebuilt


def clean_tree(tree: Tree) -> Tree | None:
    """A copy without empty elements (-NONE-), constituents left empty, function tags or indices."""
    if tree.is_preterminal():
        return None if tree.label == "-NONE-" else Tree(tree.label, list(tree.children))
    kids = [c for c in (clean_tree(k) for k in tree.children) if c is not None]
    if not kids:
        return None
    label = tree.label
    if label not in ("-LRB-", "-RRB-", "-NONE-") and label:
        label = label.replace("=", "-").split("-")[0] or label
    return Tree(label, kids)


def sentence_words(tree: Tree) -> tuple[list[str], list[str]]:
    """(words, POS tags) of the sentence the parser reads: every leaf except empty elements."""
    leaves = [p for p in tree.preterminals() if p.label != "-NONE-"]
    return [p.children[0] for p in leaves], [p.label for p in leaves]


def _wsj_files(root: Path, sections: list[str]) -> list[Path]:
    return sorted(p for s in sections for p in (root / s).glob("*.mrg"))


def _tree_sources(name: str, generated: Path | None) -> tuple[dict[str, list[str]], str]:
    """{split: gold tree texts} and an identity for the cache key. generated: the directory of a generated
    corpus (its <split>.tree files) where `name` is a generated source (harness/data/sources.py)."""
    if generated is not None:
        return {s: [t for _, t in read_tree_texts(generated / f"{s}.tree") if t.strip()]
                for s in ("train", "dev", "test")}, generated.name
    root = Path(name)
    if not root.is_dir():
        raise UserError(f"parse data {name!r} is neither 'synth' nor a directory; give 'synth', a Penn Treebank "
                        "directory with WSJ sections 00..24 of .mrg files, or one with train.tree, dev.tree and "
                        "test.tree.")
    if all((root / f"{s}.tree").is_file() for s in ("train", "dev", "test")):
        files = {s: [root / f"{s}.tree"] for s in ("train", "dev", "test")}
    elif all(_wsj_files(root, secs) for secs in WSJ_SPLITS.values()):
        files = {s: _wsj_files(root, secs) for s, secs in WSJ_SPLITS.items()}
    else:
        raise UserError(f"parse data directory {root} has neither train.tree, dev.tree and test.tree nor WSJ "
                        "section directories 02..23 of .mrg files (02-21 train, 22 dev, 23 test).")
    stamp = hashlib.sha256()
    texts: dict[str, list[str]] = {}
    for split, paths in files.items():
        texts[split] = []
        for p in paths:
            st = p.stat()
            stamp.update(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())
            texts[split] += [" ".join(t.split()) for _, t in read_tree_texts(p) if t.strip()]
    return texts, f"{root.name}-{stamp.hexdigest()[:10]}"


def parse_symbols(targets: Iterable[str]) -> tuple[str, ...]:
    """The linearized trees' tokens (brackets, XX or XX/TAG), each to be one piece of the BPE model."""
    return tuple(sorted({tok for line in targets for tok in line.split() if is_word_token(tok) or tok[:1] in "()"}))


# A training subtree's line in train.tree starts with this, so that whole trees can be told from phrases.
SUBTREE_MARK = "#phrase "


def constituents(tree: Tree, min_words: int) -> list[Tree]:
    """Every phrase below the root (no preterminal) spanning at least `min_words` words, depth-first."""
    found: list[Tree] = []

    def walk(node: Tree) -> None:
        for child in node.children:
            if isinstance(child, Tree) and not child.is_preterminal():
                if len(child.words()) >= min_words:
                    found.append(child)
                walk(child)

    walk(unwrap_root(tree))
    return found


def parse_pairs(trees: Iterable[tuple[str, str]], tagged: bool = False,
                subtrees: int = 0) -> tuple[list[str], list[str], list[str]]:
    """(sentences, linearized cleaned trees, gold trees on one line) of (where, tree text) pairs; trees with
    no word left after cleaning are skipped, and an unreadable one is a UserError naming `where`. tagged:
    words as XX/TAG (DataConfig.parse_tags). subtrees > 0: after each tree, every phrase below its root of
    at least that many words as a pair of its own (DataConfig.parse_subtrees; the gold is the cleaned phrase)."""
    src, tgt, gold = [], [], []
    for where, text in trees:
        try:
            tree = parse_tree(text)
        except ValueError as exc:
            raise UserError(f"{where} cannot be read ({exc}).") from None
        words, _ = sentence_words(tree)
        cleaned = clean_tree(tree)
        if not words or cleaned is None:
            continue
        src.append(" ".join(words))
        tgt.append(linearize(cleaned, tagged=tagged))
        gold.append(" ".join(text.split()))
        for phrase in constituents(cleaned, subtrees) if subtrees > 0 else ():
            src.append(" ".join(phrase.words()))
            tgt.append(linearize(phrase, tagged=tagged))
            gold.append(SUBTREE_MARK + str(phrase))
    return src, tgt, gold


def prepare_parse_corpus(data_cfg, generated: Path | None = None) -> Path:
    """Write (once, atomically) the parsing corpus as parallel text: <split>.src (words), <split>.tgt
    (linearized cleaned tree) and <split>.tree (the gold tree as read), in the cache directory. generated:
    the generated corpus's directory where data_cfg.name names a generated source (e.g. synth)."""
    texts, ident = _tree_sources(data_cfg.name, generated)
    tags = "-tags" if data_cfg.parse_tags else ""
    sub = f"-sub{data_cfg.parse_subtrees}" if data_cfg.parse_subtrees > 0 else ""
    out = Path(data_cfg.cache_dir).resolve() / f"parse-v{PARSE_VERSION}{tags}{sub}-{ident}"
    if (out / "manifest.json").is_file():
        return out
    with atomic_dir(out) as tmp:
        stats = {}
        for split, trees in texts.items():
            src, tgt, gold = parse_pairs(((f"{data_cfg.name}: {split} tree {i}", t) for i, t in enumerate(trees, 1)),
                                         tagged=data_cfg.parse_tags,
                                         subtrees=data_cfg.parse_subtrees if split == "train" else 0)
            for kind, lines in (("src", src), ("tgt", tgt), ("tree", gold)):
                (tmp / f"{split}.{kind}").write_text("\n".join(lines) + "\n", encoding="utf-8")
            whole = sum(1 for g in gold if not g.startswith(SUBTREE_MARK)) if split == "train" else len(gold)
            stats[split] = {
                "trees": whole,
                "examples": len(gold),
                "mean_words": sum(len(s.split()) for s in src) / max(len(src), 1),
                "mean_target_tokens": sum(len(t.split()) for t in tgt) / max(len(tgt), 1),
            }
        (tmp / "manifest.json").write_text(
            json.dumps({"source": data_cfg.name, "version": PARSE_VERSION, "splits": stats}, indent=2) + "\n"
        )
    return out
