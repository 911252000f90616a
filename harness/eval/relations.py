"""Gold relations between the words of a source sentence, read off its gold constituency tree: what the heads
probe scores attention heads against (harness/eval/heads.py; Clark et al. 2019's method).

The made-up corpus writes a bracketed tree of every source sentence (harness/data/synth/grammar.py), whose grammar is
small enough that three relations follow from the tree alone, without drawing or annotating anything anew:

- `subject`: a finite verb -> the head word of its subject (a noun, the first conjunct's noun of a coordination,
  or a pronoun). In a subject relative clause ("the dogs that bark") the gap is the subject, and the relation
  goes to the antecedent, the head noun the clause modifies, across the relative pronoun; in the source
  language the verb agrees with it (`-s`, the present's third person singular).
- `antecedent`: a relative pronoun ("that", WDT) -> the head noun of the noun phrase its clause modifies.
- `head`: every word but the root -> its syntactic head, by head rules for this grammar's labels (Collins-style:
  a verb heads its VP and clause, a noun its noun phrase, a preposition its PP, the clause's verb its SBAR;
  a coordination is headed by its first conjunct, a noun phrase with a PP or a relative clause by its noun).

A relation is a list of (dependent word, gold word) indices into the sentence's words (the tree's leaves, the
final "." among them). Plain Python: the report side may import it.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.data.trees import Tree, parse_tree

RELATIONS = ("subject", "antecedent", "head")
_NOUNS = ("NN", "NNS", "NNP", "NNPS", "PRP")


class Relations(NamedTuple):
    words: list[str]
    subject: list[tuple[int, int]]
    antecedent: list[tuple[int, int]]
    head: list[tuple[int, int]]


def _head_child(node: Tree) -> int:
    """The index of the child that heads `node` (a phrase, not a preterminal)."""
    labels = [c.label for c in node.children]
    if node.label == "S":
        return labels.index("VP") if "VP" in labels else (labels.index("S") if "S" in labels else 0)
    if node.label == "VP":
        return next((i for i, lab in enumerate(labels) if lab.startswith("VB")), 0)
    if node.label == "NP":
        if "NP" in labels:          # NP PP, NP SBAR, NP CC NP: the (first) inner noun phrase
            return labels.index("NP")
        return max((i for i, lab in enumerate(labels) if lab in _NOUNS), default=len(labels) - 1)
    if node.label == "PP":
        return labels.index("IN") if "IN" in labels else 0
    if node.label == "SBAR":
        return labels.index("S") if "S" in labels else 0
    if node.label == "WHNP":
        return labels.index("WDT") if "WDT" in labels else 0
    if node.label == "ADJP":
        return max((i for i, lab in enumerate(labels) if lab.startswith("JJ")), default=len(labels) - 1)
    if node.label == "ADVP":
        return next((i for i, lab in enumerate(labels) if lab == "RB"), 0)
    return 0


def relations(tree: Tree | str) -> Relations:
    """The three relations of one source sentence's gold tree (a Tree or its bracketed text)."""
    if isinstance(tree, str):
        tree = parse_tree(tree)
    words = tree.words()
    spans: dict[int, tuple[int, int]] = {}       # id(node) -> (first word, head word)
    parents: dict[int, Tree | None] = {id(tree): None}
    heads: dict[int, int] = {}

    def walk(node: Tree, start: int) -> int:
        """Fills spans and the head relation below `node`, whose first word is `start`; returns its word count."""
        if node.is_preterminal():
            spans[id(node)] = (start, start)
            return 1
        n, child_heads = 0, []
        for child in node.children:
            parents[id(child)] = node
            n += walk(child, start + n)
            child_heads.append(spans[id(child)][1])
        h = child_heads[_head_child(node)]
        for w in child_heads:
            if w != h:
                heads[w] = h
        spans[id(node)] = (start, h)
        return n

    walk(tree, 0)

    def head_of(node: Tree) -> int:
        return spans[id(node)][1]

    def antecedent_of(sbar: Tree) -> int | None:
        """The head noun of the noun phrase a relative clause (SBAR with a WHNP) modifies."""
        np = parents.get(id(sbar))
        return head_of(np) if np is not None and np.label == "NP" else None

    subject, antecedent = [], []

    def collect(node: Tree) -> None:
        if node.is_preterminal():
            return
        labels = [c.label for c in node.children]
        if node.label == "S" and "VP" in labels:
            verb = head_of(node.children[labels.index("VP")])
            if "NP" in labels[:labels.index("VP")]:
                subject.append((verb, head_of(node.children[labels.index("NP")])))
            else:                                 # the subject gap of a relative clause: the antecedent
                sbar = parents.get(id(node))
                if sbar is not None and sbar.label == "SBAR" and "WHNP" in [c.label for c in sbar.children]:
                    a = antecedent_of(sbar)
                    if a is not None:
                        subject.append((verb, a))
        if node.label == "SBAR" and "WHNP" in labels:
            a = antecedent_of(node)
            if a is not None:
                antecedent.append((head_of(node.children[labels.index("WHNP")]), a))
        for child in node.children:
            collect(child)

    collect(tree)
    return Relations(words, sorted(subject), sorted(antecedent), sorted(heads.items()))
