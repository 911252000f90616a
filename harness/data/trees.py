"""Bracketed parse trees: a minimal tree type, readers, and the Vinyals et al. (2015) linearization.

Table 4 trains a sequence-to-sequence model on linearized trees ("Grammar as a Foreign Language"):
`(S (NP (DT the) (NN dog)) (VP (VBZ runs)))` becomes `(S (NP XX XX )NP (VP XX )VP )S`. `delinearize`
turns a (possibly malformed) model output back into a tree over the sentence's words so EVALB can score it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError

# An opening bracket carries its label glued to it, as in PTB and EVALB: "(NP" has label NP, while
# "( (S" opens a node with the empty label (the usual PTB root). Words never contain brackets (-LRB-).
_TOKEN = re.compile(r"\(([^\s()]*)|\)|[^\s()]+")
_EXAMPLE = "one bracketed tree such as (S (NP (DT the) (NN dog)) (VP (VBZ runs)))"


@dataclass
class Tree:
    """A constituent: `children` are Trees, or exactly one word (a str) for a preterminal `(DT the)`."""

    label: str
    children: list = field(default_factory=list)

    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self) -> list[Tree]:
        if self.is_preterminal():
            return [self]
        return [p for c in self.children for p in c.preterminals()]

    def words(self) -> list[str]:
        return [p.children[0] for p in self.preterminals()]

    def pos(self) -> list[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        if self.is_preterminal():
            return f"({self.label} {self.children[0]})"
        if not self.children:
            return f"({self.label})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


def parse_tree(text: str) -> Tree:
    """Parse one bracketed tree (it may span lines); raises ValueError saying what is wrong."""
    stack: list[Tree] = []
    root = None
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok.startswith("("):
            node = Tree(m.group(1))
            if stack:
                stack[-1].children.append(node)
            elif root is not None:
                raise ValueError(f"a second tree starts at character {m.start()}")
            else:
                root = node
            stack.append(node)
        elif tok == ")":
            if not stack:
                raise ValueError(f"unmatched ')' at character {m.start()}")
            node = stack.pop()
            # EVALB reads "(X w)" as a preterminal and rejects "(X w1 w2)" or a word beside a subtree.
            if any(isinstance(c, str) for c in node.children) and len(node.children) != 1:
                raise ValueError(f"bracket ({node.label} ...) mixes words and brackets or holds several words")
        elif stack:
            stack[-1].children.append(tok)
        else:
            raise ValueError(f"word {tok!r} outside any bracket")
    if stack:
        raise ValueError(f"{len(stack)} bracket(s) left open")
    if root is None:
        raise ValueError("no tree")
    return root


def read_lines(path: str | Path) -> list[str]:
    """A file's lines as C's fgets (and so EVALB) sees them: split at "\\n" only, not decoded with universal
    newlines, so a "\\r" (of "\\r\\n"), "\\f" or "\\v" stays inside its line, where tree readers take it as a space."""
    lines = Path(path).read_bytes().decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_tree_texts(path: str | Path) -> list[tuple[int, str]]:
    """(first line number, text) of each tree in a file.

    If every line is balanced the file is one tree per line and every line is an entry (a blank one too,
    as EVALB counts lines). Otherwise it is read as a Penn Treebank .mrg file: a tree runs until its
    brackets balance, and blank lines between trees are ignored.
    """
    path = Path(path)
    try:
        lines = read_lines(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"Cannot read tree file {path} ({exc}); give a readable UTF-8 file of bracketed trees.")
    if all(line.count("(") == line.count(")") for line in lines):
        return [(i, line) for i, line in enumerate(lines, 1)]
    out, buf, depth, start = [], [], 0, 0
    for i, line in enumerate(lines, 1):
        if not buf and not line.strip():
            continue
        if not buf:
            start = i
        buf.append(line)
        depth += line.count("(") - line.count(")")
        if depth < 0:
            raise UserError(f"{path}:{i}: a ')' closes more brackets than were opened; expected {_EXAMPLE}.")
        if depth == 0:
            out.append((start, "\n".join(buf)))
            buf = []
    if buf:
        raise UserError(f"{path}:{start}: the tree starting here is never closed; expected {_EXAMPLE}.")
    return out


def read_trees(path: str | Path) -> list[Tree]:
    """All trees of a one-per-line or .mrg-style file (blank lines skipped)."""
    trees = []
    for line, text in read_tree_texts(path):
        if not text.strip():
            continue
        try:
            trees.append(parse_tree(text))
        except ValueError as exc:
            raise UserError(f"{path}:{line}: cannot read the tree ({exc}); expected {_EXAMPLE}.")
    return trees


def unwrap_root(tree: Tree) -> Tree:
    # PTB's "( (S ...) )" and "(TOP (S ...))" wrappers are not part of the Vinyals target, which starts at S.
    while tree.label in ("", "TOP") and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]
    return tree


# A word of a linearized tree: XX (Vinyals' normalization), or XX/TAG with its POS tag (DataConfig.parse_tags).
WORD, TAGGED = "XX", "XX/"


def is_word_token(tok: str) -> bool:
    """Whether a linearized-tree token stands for a word (XX or XX/TAG), not a bracket."""
    return tok == WORD or tok.startswith(TAGGED)


def linearize(tree: Tree | str, pos_as_xx: bool = True, tagged: bool = False) -> str:
    """Depth-first `(NP ... )NP` sequence; each word becomes XX (Vinyals' normalization), XX/TAG (`tagged`)
    or its bare POS tag (pos_as_xx False)."""
    tree = unwrap_root(parse_tree(tree) if isinstance(tree, str) else tree)
    out: list[str] = []

    def walk(node: Tree) -> None:
        if node.is_preterminal():
            out.append(TAGGED + node.label if tagged else WORD if pos_as_xx else node.label)
            return
        out.append("(" + node.label)
        for child in node.children:
            walk(child)
        out.append(")" + node.label)

    walk(tree)
    return " ".join(out)


def delinearize(tokens: list[str] | str, words: list[str], pos: list[str] | None = None) -> str:
    """Repair a model's linearized output into a well-formed tree string over `words`.

    Rules, applied left to right:
      1. `(LABEL` opens a constituent. Any `)...` closes the innermost open one (the label written on the
         closing bracket is ignored); a closing bracket with nothing open is dropped.
      2. Every other token is a leaf slot. Slots beyond len(words) are dropped.
      3. Missing slots are added at the end, under the innermost constituent still open; if all are
         closed, under the last top-level constituent. Then every unclosed constituent is closed.
      4. Constituents that end up with no leaf are removed (they would have no span).
      5. Several top-level items (or a bare top-level leaf) are wrapped in one `S`; an output with no
         constituent at all gives the flat `(S (XX w1) (XX w2) ...)`.
      6. Leaf i becomes `(pos[i] words[i])`, or `(XX words[i])` without pos.
    With no words there is nothing to parse and the result is "" (EVALB skips such a line).
    """
    if isinstance(tokens, str):
        tokens = tokens.split()
    if pos is not None and len(pos) != len(words):
        raise ValueError(f"{len(pos)} POS tags for {len(words)} words")
    n = len(words)
    if n == 0:
        return ""
    roots: list[Tree] = []
    stack: list[Tree] = []
    slots = 0
    for tok in tokens:
        if tok.startswith("("):
            node = Tree(tok[1:])
            (stack[-1].children if stack else roots).append(node)
            stack.append(node)
        elif tok.startswith(")"):
            if stack:
                stack.pop()
        elif slots < n:
            (stack[-1].children if stack else roots).append(Tree("XX", [""]))
            slots += 1
    if stack:
        parent = stack[-1].children
    elif roots and not roots[-1].is_preterminal():
        parent = roots[-1].children
    else:
        parent = roots
    parent.extend(Tree("XX", [""]) for _ in range(n - slots))

    def prune(children: list) -> list:
        kept = []
        for c in children:
            if not c.is_preterminal():
                c.children = prune(c.children)
                if not c.children:
                    continue
            kept.append(c)
        return kept

    roots = prune(roots)
    root = roots[0] if len(roots) == 1 and not roots[0].is_preterminal() else Tree("S", roots)
    for i, leaf in enumerate(root.preterminals()):
        leaf.label = pos[i] if pos is not None else "XX"
        leaf.children = [words[i]]
    return str(root)
