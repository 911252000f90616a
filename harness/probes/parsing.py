"""Table 4: English constituency parsing as translation (§6.3; Vinyals et al. 2015, "Grammar as a Foreign
Language"): the source is a sentence's words, the target its tree linearized depth-first with words as XX.

Tree sources (the data name of a study row with `task: parse`):
  synth      the made-up grammar's gold trees (the same generator, and the same cached corpus, as the
             translation task: train.tree / dev.tree / test.tree beside train.src ...);
  DIRECTORY  the user's Penn Treebank: either WSJ sections as directories 00..24 of .mrg files (sections
             02-21 train, 22 dev, 23 test, the standard split) or files train.tree, dev.tree, test.tree
             (one tree a line or .mrg style).
Training targets are cleaned as usual for this task: empty elements (-NONE- and the constituents left
without words) removed, function tags and indices cut (NP-SBJ-1 -> NP); the PTB's empty root bracket is
dropped. Gold trees for scoring are kept as read: EVALB (harness/probes/evalb.py, COLLINS.prm) deletes
what it deletes itself.

Scoring: each output is repaired into a tree over the sentence's words (trees.delinearize), its
preterminals labelled with the gold POS tags (the model predicts only XX, as in Vinyals et al.; EVALB's
tagging accuracy is therefore 100 by construction and not reported), then scored by EVALB rules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from harness.errors import UserError

from .evalb import score_trees
from .trees import Tree, linearize, parse_tree, read_tree_texts

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


def _tree_sources(name: str, data_cfg) -> tuple[dict[str, list[str]], str]:
    """{split: gold tree texts} and an identity for the cache key."""
    if name == "synth":
        from harness.data.corpus import corpus_dir
        root = corpus_dir(dataclasses.replace(data_cfg, task="translate"))
        return {s: [t for _, t in read_tree_texts(root / f"{s}.tree") if t.strip()]
                for s in ("train", "dev", "test")}, root.name
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


def prepare_parse_corpus(data_cfg) -> Path:
    """Write (once, atomically) the parsing corpus as parallel text: <split>.src (words), <split>.tgt
    (linearized cleaned tree) and <split>.tree (the gold tree as read), in the cache directory."""
    texts, ident = _tree_sources(data_cfg.name, data_cfg)
    out = Path(data_cfg.cache_dir).resolve() / f"parse-v{PARSE_VERSION}-{ident}"
    if (out / "manifest.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)
    try:
        stats = {}
        for split, trees in texts.items():
            src, tgt, gold = [], [], []
            for i, text in enumerate(trees, 1):
                try:
                    tree = parse_tree(text)
                except ValueError as exc:
                    raise UserError(f"{data_cfg.name}: {split} tree {i} cannot be read ({exc}).") from None
                words, _ = sentence_words(tree)
                cleaned = clean_tree(tree)
                if not words or cleaned is None:
                    continue
                src.append(" ".join(words))
                tgt.append(linearize(cleaned))
                gold.append(" ".join(text.split()))
            for kind, lines in (("src", src), ("tgt", tgt), ("tree", gold)):
                (tmp / f"{split}.{kind}").write_text("\n".join(lines) + "\n", encoding="utf-8")
            stats[split] = {"trees": len(gold), "mean_words": sum(len(s.split()) for s in src) / max(len(src), 1),
                            "mean_target_tokens": sum(len(t.split()) for t in tgt) / max(len(tgt), 1)}
        (tmp / "manifest.json").write_text(json.dumps({"source": data_cfg.name, "version": PARSE_VERSION,
                                                       "splits": stats}, indent=2) + "\n")
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / "manifest.json").is_file():     # someone else finished first: theirs is the same
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def well_formed(output: str, n_words: int) -> bool:
    """The raw output is a linearized tree over exactly n_words words: brackets balanced, each closing
    label equal to its opening one, one root, no word outside it."""
    stack: list[str] = []
    words = roots = 0
    for tok in output.split():
        if tok.startswith("("):
            if not stack:
                roots += 1
            stack.append(tok[1:])
        elif tok.startswith(")"):
            if not stack or stack.pop() != tok[1:]:
                return False
        else:
            if not stack:
                return False
            words += 1
    return not stack and roots == 1 and words == n_words


def parse_scores(outputs: list[str], sources: list[str], gold_trees: list[str]) -> tuple[dict, list[str]]:
    """Repair each output into a tree over its sentence and score all of them against the gold trees as
    EVALB does. Returns the metrics (F1, recall, precision, complete match, average crossing, the share of
    outputs already well formed) and the repaired trees."""
    from .trees import delinearize
    repaired = []
    for out, src, gold in zip(outputs, sources, gold_trees):
        words, pos = sentence_words(parse_tree(gold))
        assert words == src.split(), "the parse corpus pairs each sentence with its own tree"
        tree = delinearize(out, words, pos)
        # EVALB compares roots too: give the repaired tree the gold's wrapper (PTB's "( (S ...))" or TOP).
        g = gold.strip()
        if g.startswith("( ") or g.startswith("(("):
            tree = f"( {tree})"
        elif g.startswith("(TOP "):
            tree = f"(TOP {tree})"
        repaired.append(tree)
    result = score_trees(list(gold_trees), repaired)["summary"]["all"]
    n = max(len(outputs), 1)
    metrics = {"f1": result["fmeasure"], "recall": result["recall"], "precision": result["precision"],
               "complete_match": result["complete_match"], "average_crossing": result["average_crossing"],
               "well_formed": 100.0 * sum(well_formed(o, len(s.split())) for o, s in zip(outputs, sources)) / n,
               "error_sentences": result["error_sentences"], "skip_sentences": result["skip_sentences"]}
    return metrics, repaired
