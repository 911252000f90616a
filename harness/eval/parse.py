"""Table 4's scoring: parsing as translation (§6.3), each output repaired into a tree over the sentence's
words (trees.delinearize), its preterminals labelled with the gold POS tags (the model predicts only XX, as
in Vinyals et al.; EVALB's tagging accuracy is therefore 100 by construction and not reported), then scored
by EVALB rules (harness/eval/evalb.py). The corpus itself is harness/data/parse.py.
"""

from __future__ import annotations

import torch

from harness.data.parse import sentence_words
from harness.data.trees import delinearize, is_word_token, parse_tree
from harness.eval.evalb import score_trees


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
            elif is_word_token(n):
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
