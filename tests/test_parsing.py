"""Table 4's parsing task: cleaning, corpus preparation from synth / PTB layouts, repair and scoring."""

import pytest

from harness.data.corpus import DataConfig, load_dataset
from harness.data.parse import SUBTREE_MARK, clean_tree, constituents, prepare_parse_corpus, sentence_words
from harness.data.trees import linearize, parse_tree
from harness.errors import UserError
from harness.eval.evalb import score_trees
from harness.eval.parse import TreeConstraint, parse_scores, well_formed

PTB = ("( (S (NP-SBJ-1 (DT The) (NN dog)) (VP (VBD was) (VP (VBN seen) (NP (-NONE- *-1)) "
       "(PP-LOC (IN in) (NP (DT the) (NN park))))) (. .)) )")


def test_clean_tree_drops_empty_elements_and_function_tags():
    cleaned = clean_tree(parse_tree(PTB))
    assert str(cleaned) == ("( (S (NP (DT The) (NN dog)) (VP (VBD was) (VP (VBN seen) (PP (IN in) "
                            "(NP (DT the) (NN park))))) (. .)))")
    assert linearize(cleaned) == "(S (NP XX XX )NP (VP XX (VP XX (PP XX (NP XX XX )NP )PP )VP )VP XX )S"
    # -LRB- and friends keep their dashes
    assert str(clean_tree(parse_tree("(S (-LRB- -LRB-) (NP=2 (NN x)))"))) == "(S (-LRB- -LRB-) (NP (NN x)))"


def test_sentence_words_skip_traces():
    words, pos = sentence_words(parse_tree(PTB))
    assert words == "The dog was seen in the park .".split()
    assert pos == ["DT", "NN", "VBD", "VBN", "IN", "DT", "NN", "."]


@pytest.mark.parametrize("output,n,ok", [
    ("(S (NP XX XX )NP (VP XX )VP )S", 3, True),
    ("(S (NP XX XX )NP (VP XX )VP )S", 4, False),          # a word short
    ("(S (NP XX XX )VP (VP XX )VP )S", 3, False),          # closing label differs
    ("(S (NP XX XX )NP (VP XX )VP", 3, False),             # left open
    ("(S XX )S (S XX )S", 2, False),                       # two roots
    ("XX (S XX XX )S", 3, False),                          # a word outside
    ("", 0, False),
])
def test_well_formed(output, n, ok):
    assert well_formed(output, n) is ok


def test_parse_scores_perfect_empty_and_wrapped_roots():
    gold = [PTB, "(S (NP (PRP it)) (VP (VBZ works)) (. .))"]
    src = ["The dog was seen in the park .", "it works ."]
    perfect = [linearize(clean_tree(parse_tree(g))) for g in gold]
    scores, trees = parse_scores(perfect, src, gold)
    assert scores["f1"] == 100.0 and scores["complete_match"] == 100.0 and scores["well_formed"] == 100.0
    assert trees[0].startswith("( (S ") and trees[1].startswith("(S ")
    # nothing predicted: the repaired flat tree is scored as EVALB scores it, not dropped
    scores, trees = parse_scores(["", ""], src, gold)
    assert trees[1] == "(S (PRP it) (VBZ works) (. .))"
    assert scores["f1"] == pytest.approx(score_trees(gold, trees)["summary"]["all"]["fmeasure"])
    assert 0 < scores["f1"] < 100 and scores["well_formed"] == 0.0


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_prepare_from_wsj_sections_and_split_files(tmp_path):
    mrg = PTB.replace(" (VP (VBD", "\n    (VP (VBD") + "\n\n" + "( (S (NP (PRP it)) (VP (VBZ works)) (. .)) )\n"
    wsj = tmp_path / "wsj"
    for sec in ("02", "21", "22", "23"):
        _write(wsj / sec / f"wsj_{sec}01.mrg", mrg)
    out = prepare_parse_corpus(DataConfig(name=str(wsj), task="parse", cache_dir=str(tmp_path / "cache")))
    src = (out / "train.src").read_text().splitlines()
    assert src == ["The dog was seen in the park .", "it works ."] * 2      # sections 02 and 21
    assert (out / "test.src").read_text().splitlines() == ["The dog was seen in the park .", "it works ."]
    tgt = (out / "dev.tgt").read_text().splitlines()
    assert tgt[1] == "(S (NP XX )NP (VP XX )VP XX )S"
    assert (out / "test.tree").read_text().splitlines()[0] == " ".join(PTB.split())

    flat = tmp_path / "flat"
    for split in ("train", "dev", "test"):
        _write(flat / f"{split}.tree", "(S (NP (PRP it)) (VP (VBZ works)) (. .))\n")
    out = prepare_parse_corpus(DataConfig(name=str(flat), task="parse", cache_dir=str(tmp_path / "cache")))
    assert (out / "dev.src").read_text() == "it works .\n"


def test_prepare_refuses_a_directory_without_trees(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="neither train.tree, dev.tree and test.tree nor WSJ"):
        prepare_parse_corpus(DataConfig(name=str(tmp_path / "empty"), task="parse", cache_dir=str(tmp_path)))
    _write(tmp_path / "bad" / "train.tree", "(S (NP (PRP it)) (VP (VBZ works)) (. .)\n")
    for split in ("dev", "test"):
        _write(tmp_path / "bad" / f"{split}.tree", "(S (NP (PRP it)) (VP (VBZ works)) (. .))\n")
    with pytest.raises(UserError, match="never closed"):
        prepare_parse_corpus(DataConfig(name=str(tmp_path / "bad"), task="parse", cache_dir=str(tmp_path)))


def test_synth_parse_dataset_pairs_sentences_with_their_trees(tmp_path):
    cfg = DataConfig(name="synth", task="parse", train_pairs=300, dev_pairs=5, test_pairs=5,
                     lexicon_scale=0.1, cache_dir=str(tmp_path))
    data = load_dataset(cfg, vocab_size=300)
    assert len(data.dev.trees) == len(data.dev.src_text) == 5
    for src, tgt, tree in zip(data.dev.src_text, data.dev.tgt_text, data.dev.trees):
        t = parse_tree(tree)
        assert t.words() == src.split()
        assert tgt == linearize(clean_tree(t)) and well_formed(tgt, len(src.split()))
    # the translation corpus underneath is the same generated one
    translate = load_dataset(DataConfig(**{**cfg.__dict__, "task": "translate"}), vocab_size=300)
    assert translate.dev.src_text == data.dev.src_text and translate.dev.trees is None
    # every bracket token and XX of a linearized tree is one subword piece, never "(" + "NP"
    for tgt in data.dev.tgt_text:
        pieces = data.tokenizer.sp.encode(tgt, out_type=str)
        assert [p.lstrip("\u2581") for p in pieces] == tgt.split()
    assert data.tokenizer.decode([data.tokenizer.encode([tgt])[0] for tgt in data.dev.tgt_text]) == data.dev.tgt_text


def test_tree_constraint_makes_every_beam_output_a_tree():
    """Untrained model, random sources: under the constraint every output is a tree over exactly the
    sentence's words, and no source-word piece is ever emitted; without it, they are not."""
    import torch

    from model import Transformer, TransformerConfig, beam_search

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "\u2581(S", "\u2581)S", "\u2581(NP", "\u2581)NP", "\u2581(VP",
              "\u2581)VP", "\u2581XX", "\u2581the", "\u2581dog", "s", "\u2581barks", "\u2581("]
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=len(pieces), d_model=16, d_ff=32, n_heads=2, n_layers=1,
                                          max_len=128)).eval()
    n_words = [1, 3, 5, 2]
    src = torch.zeros((len(n_words), max(n_words)), dtype=torch.long)
    for i, n in enumerate(n_words):
        src[i, :n] = torch.randint(11, len(pieces), (n,))
    beam = 3
    make = lambda: TreeConstraint(pieces, 3, n_words, beam, "cpu")  # noqa: E731
    assert make().usable
    text = lambda ids: " ".join(pieces[i].lstrip("\u2581") for i in ids)  # noqa: E731
    held = beam_search(model, src, 2, 3, beam_size=beam, alpha=0.3, max_extra=60, constraint=make())
    for ids, n in zip(held, n_words):
        assert well_formed(text(ids), n), text(ids)
        assert all(pieces[i].lstrip("\u2581") in ("(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX") for i in ids)
    free = beam_search(model, src, 2, 3, beam_size=beam, alpha=0.3, max_extra=60)
    assert not all(well_formed(text(ids), n) for ids, n in zip(free, n_words))


def test_tree_constraint_rules_step_by_step():
    import torch

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "(S", ")S", "(NP", ")NP", "XX", "dog"]
    c = TreeConstraint(pieces, 3, [1], 1, "cpu")
    allowed = lambda: {pieces[i] for i in (c.mask(0)[0] == 0).nonzero().flatten().tolist()}  # noqa: E731
    assert allowed() == {"(S", "(NP"}                       # a tree must start with a bracket
    c.advance(torch.tensor([0]), torch.tensor([4]))         # (S
    assert allowed() == {"(S", "(NP", "XX"}                 # no close of an empty constituent, no EOS
    c.advance(torch.tensor([0]), torch.tensor([6]))         # (NP
    c.advance(torch.tensor([0]), torch.tensor([8]))         # XX: the one word is placed
    assert allowed() == {")NP"}                             # only the matching close
    c.advance(torch.tensor([0]), torch.tensor([7]))
    assert allowed() == {")S"}
    c.advance(torch.tensor([0]), torch.tensor([5]))
    assert allowed() == {"</s>"}


def test_tagged_targets_carry_each_words_tag_as_one_piece_and_count_as_words(tmp_path):
    """data.parse_tags: XX/TAG in place of XX, in its own cached corpus; every XX/TAG one BPE piece, which
    the tree constraint and the model's word positions take for a word."""
    flat = tmp_path / "flat"
    for split in ("train", "dev", "test"):
        _write(flat / f"{split}.tree", "(S (NP (PRP it)) (VP (VBZ works) (, ,)) (. .))\n(S (NP (NN dog)) (VP (VBZ "
                                       "runs)))\n")
    plain = DataConfig(name=str(flat), task="parse", cache_dir=str(tmp_path / "cache"))
    tagged = DataConfig(**{**plain.__dict__, "parse_tags": True})
    assert prepare_parse_corpus(plain) != prepare_parse_corpus(tagged)
    data = load_dataset(tagged, vocab_size=60)
    assert data.dev.tgt_text[0] == "(S (NP XX/PRP )NP (VP XX/VBZ XX/, )VP XX/. )S"
    for tgt in data.dev.tgt_text:
        assert [p.lstrip("\u2581") for p in data.tokenizer.sp.encode(tgt, out_type=str)] == tgt.split()
    starts, words = data.tokenizer.word_marks()
    names = {data.tokenizer.sp.id_to_piece(i) for i in words}
    assert names == {"\u2581XX/" + t for t in ("PRP", "VBZ", ",", ".", "NN")}
    pieces = [data.tokenizer.sp.id_to_piece(i) for i in range(data.tokenizer.vocab_size)]
    c = TreeConstraint(pieces, 3, [2], 1, "cpu")
    assert {pieces[i] for i in c.xx_ids.tolist()} == names
    with pytest.raises(UserError, match="XX as one piece"):
        load_dataset(DataConfig(**{**plain.__dict__, "task": "translate", "name": "synth", "train_pairs": 50,
                                   "dev_pairs": 5, "test_pairs": 5, "lexicon_scale": 0.1}), 200).tokenizer.word_marks()


def test_parse_subtrees_add_the_phrases_of_training_trees_only(tmp_path):
    """data.parse_subtrees k: every phrase below a training tree's root with at least k words becomes a pair of
    its own (its words, its linearized cleaned subtree); dev and test keep whole sentences, and the whole trees
    are still counted apart (train_trees) from the pairs read."""
    tree = "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)) )"
    cleaned = clean_tree(parse_tree(tree))
    assert [str(p) for p in constituents(cleaned, 3)] == [
        "(VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))))", "(PP (IN on) (NP (DT the) (NN mat)))"]
    assert [len(p.words()) for p in constituents(cleaned, 2)] == [2, 4, 3, 2]
    flat = tmp_path / "flat"
    for split in ("train", "dev", "test"):
        _write(flat / f"{split}.tree", tree + "\n(S (NP (NN dog)) (VP (VBZ runs)))\n")
    whole = DataConfig(name=str(flat), task="parse", cache_dir=str(tmp_path / "cache"))
    sub = DataConfig(**{**whole.__dict__, "parse_subtrees": 3})
    assert prepare_parse_corpus(whole) != prepare_parse_corpus(sub)
    data = load_dataset(sub, vocab_size=60)
    assert data.train.src_text == ["The cat sat on the mat .", "sat on the mat", "on the mat", "dog runs"]
    assert data.train.tgt_text[1:3] == ["(VP XX (PP XX (NP XX XX )NP )PP )VP", "(PP XX (NP XX XX )NP )PP"]
    assert [t.startswith(SUBTREE_MARK) for t in data.train.trees] == [False, True, True, False]
    assert data.dev.src_text == data.test.src_text == ["The cat sat on the mat .", "dog runs"]
    assert data.info["train_trees"] == 2 and len(data.train.data) == 4
    # a whole tree dropped for its length (16 target tokens) is not counted; its phrase that fits (PP, 8) trains
    short = load_dataset(sub, vocab_size=60, max_len=10)
    assert short.info["train_trees"] == 1 and len(short.train.data) == 2


def test_word_positions_with_packed_batches_are_refused_before_anything_is_written(tmp_path):
    from harness.train.config import TrainConfig
    from harness.train.loop import train
    from model import TransformerConfig
    out = tmp_path / "out"
    with pytest.raises(UserError, match="set train.pack false"):
        train(TransformerConfig(d_model=16, d_ff=32, n_heads=2, n_layers=1, vocab_size=64, word_positions=True),
              TrainConfig(steps=1, pack=True), DataConfig(task="parse", cache_dir=str(tmp_path)), out, quiet=True)
    assert not (out / "config.json").exists() and not any(tmp_path.glob("parse-*"))
