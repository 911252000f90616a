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

import torch

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


class TreeConstraint:
    """Constrained decoding for Table 4 (a flag, beside the paper's unconstrained search plus repair): at
    every step only the subword pieces that keep the output a prefix of a linearized tree over exactly the
    sentence's words are allowed. State per beam row, vectorized: the stack of open labels, the words
    emitted so far and where each open constituent began. Rules:
      - `(L` opens a constituent while words are left (and, outside any bracket, only as the first token);
      - `XX` (a word) only inside a bracket while words are left;
      - `)L` closes the innermost open constituent if its label is L and it holds a word, and the outermost
        one only once every word is placed;
      - EOS only after the root has closed.
    Pieces that are neither a bracket nor XX (source-word pieces) are never allowed. `pieces` are the
    vocabulary's piece strings (sentencepiece's leading "▁" ignored); `n_words` the word count of each
    sentence; `beam` the rows per sentence."""

    def __init__(self, pieces, eos: int, n_words: list[int], beam: int, device, max_depth: int = 64):
        """pieces: the vocabulary's piece strings, or the `vocab` of another TreeConstraint on the same device
        (the classification of the pieces is then not done again for every batch)."""
        self.device = torch.device(device)
        if isinstance(pieces, dict):
            self.vocab_info = pieces
        else:
            self.vocab_info = self._classify(list(pieces), self.device)
        self.__dict__.update(self.vocab_info)
        self.eos, self.max_depth = eos, max_depth
        rows = len(n_words) * beam
        self.n = torch.tensor(n_words, dtype=torch.long, device=self.device).repeat_interleave(beam)
        self.depth = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.words = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.roots = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.stack = torch.full((rows, max_depth + 1), self.n_labels, dtype=torch.long, device=self.device)
        self.began = torch.zeros((rows, max_depth + 1), dtype=torch.long, device=self.device)
        self.limit: torch.Tensor | None = None

    @staticmethod
    def _classify(pieces: list[str], device) -> dict:
        """Which pieces open or close which label, and which is a word (XX): once per vocabulary."""
        names = [p.lstrip("\u2581") for p in pieces]
        labels = sorted({n[1:] for n in names if len(n) > 1 and n[0] in "()"})
        index = {lab: i for i, lab in enumerate(labels)}
        open_ids = torch.tensor([i for i, n in enumerate(names) if n[:1] == "(" and n[1:] in index],
                                dtype=torch.long)
        close_of = torch.full((len(labels) + 1,), -1, dtype=torch.long)       # label -> close piece
        label_of = torch.full((len(pieces),), -1, dtype=torch.long)           # piece -> label
        kind = torch.zeros(len(pieces), dtype=torch.long)                      # 0 other, 1 open, 2 close, 3 word
        for i, n in enumerate(names):
            if n[:1] in "()" and n[1:] in index:
                label_of[i] = index[n[1:]]
                kind[i] = 1 if n[0] == "(" else 2
                if n[0] == ")" and close_of[index[n[1:]]] < 0:
                    close_of[index[n[1:]]] = i
            elif n == "XX":
                kind[i] = 3
        return {"open_ids": open_ids.to(device), "close_of": close_of.to(device), "label_of": label_of.to(device),
                "kind": kind.to(device), "xx_ids": (kind == 3).nonzero().flatten().to(device),
                "vocab": len(pieces), "n_labels": len(labels)}

    def start(self, limits: torch.Tensor) -> None:
        """Each sentence's output limit (tokens, EOS included): a bracket or word is allowed only while the
        tree can still be finished (every open bracket closed, every word placed, EOS) within it."""
        self.limit = limits.to(self.device).repeat_interleave(self.n.size(0) // limits.size(0))

    @property
    def usable(self) -> bool:
        """Whether the vocabulary has whole pieces for words and brackets (else the constraint cannot work)."""
        return len(self.open_ids) > 0 and len(self.xx_ids) > 0 and bool((self.close_of[:-1] >= 0).any())

    def mask(self, t: int) -> torch.Tensor:
        rows = self.depth.size(0)
        allowed = torch.zeros((rows, self.vocab), dtype=torch.bool, device=self.device)
        left = self.words < self.n
        inside = self.depth > 0
        # Positions left after this token, against what finishing needs: closes, words, EOS.
        room = (self.limit - t - 1) if self.limit is not None else torch.full_like(self.n, 1 << 30)
        need = self.depth + (self.n - self.words) + 1
        can_open = left & (inside | (self.roots == 0)) & (self.depth < self.max_depth) & (room >= need + 1)
        allowed[:, self.open_ids] = can_open[:, None]
        allowed[:, self.xx_ids] = (inside & left & (room >= need - 1))[:, None]
        r = torch.arange(rows, device=self.device)
        top = self.stack[r, self.depth]                                   # label of the innermost open one
        holds_word = self.words > self.began[r, self.depth]
        can_close = inside & holds_word & ((self.depth > 1) | ~left)
        close_id = self.close_of[top]
        ok = can_close & (close_id >= 0)
        allowed[r[ok], close_id[ok]] = True
        allowed[:, self.eos] = (~inside & (self.roots == 1) & ~left) | ~allowed.any(1)   # never a dead end
        return torch.where(allowed, 0.0, float("-inf"))

    def advance(self, src_rows: torch.Tensor, tokens: torch.Tensor) -> None:
        for name in ("n", "depth", "words", "roots", "stack", "began", *(("limit",) if self.limit is not None else ())):
            setattr(self, name, getattr(self, name)[src_rows])
        kind = self.kind[tokens]
        r = torch.arange(tokens.size(0), device=self.device)
        opening = kind == 1
        self.roots += (opening & (self.depth == 0)).long()
        new_depth = self.depth + opening.long()
        self.stack[r[opening], new_depth[opening]] = self.label_of[tokens[opening]]
        self.began[r[opening], new_depth[opening]] = self.words[opening]
        self.words += (kind == 3).long()
        self.depth = new_depth - (kind == 2).long()
