"""The heads probe (harness/eval/heads.py): gold relations from trees, head scores of hand-built attention, the
masking hook (bit-identical with nothing masked), the uniform baseline against a hand-written reference, the
pruning share and the rank correlation, a trained run probed through the trainer and the CLI, the report's
section and the threshold claims."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from harness.cli import main
from harness.eval.heads import (
    Head,
    HeadMask,
    UniformHeads,
    attention_layers,
    head_scores,
    prunable,
    spearman,
    word_index,
)
from harness.eval.relations import relations
from model import build_model
from tests.helpers import assert_titled_by_study, record_figures, small

# "the dogs that the cat sees bark near the house ." : an object relative clause between subject and verb
TREE = ("(S (NP (NP (DT the) (NNS dogs)) (SBAR (WHNP (WDT that)) (S (NP (DT the) (NN cat)) (VP (VBZ sees)))))"
        " (VP (VBP bark) (PP (IN near) (NP (DT the) (NN house)))) (. .))")
# "the dog that barks runs ." : a subject relative clause, whose verb's subject is the antecedent
TREE_SUBJ = "(S (NP (NP (DT the) (NN dog)) (SBAR (WHNP (WDT that)) (S (VP (VBZ barks))))) (VP (VBZ runs)) (. .))"


def test_relations_follow_the_gold_tree():
    r = relations(TREE)
    assert r.words == "the dogs that the cat sees bark near the house .".split()
    assert r.subject == [(5, 4), (6, 1)]                 # sees -> cat; bark -> dogs, 5 words away
    assert r.antecedent == [(2, 1)]                      # that -> dogs
    heads = dict(r.head)
    assert heads == {0: 1, 1: 6, 2: 5, 3: 4, 4: 5, 5: 1, 7: 6, 8: 9, 9: 7, 10: 6}   # bark is the root
    s = relations(TREE_SUBJ)
    assert s.subject == [(3, 1), (4, 1)]                 # barks -> dog (the gap), runs -> dog
    assert s.antecedent == [(2, 1)]


def test_head_scores_of_a_hand_built_pattern():
    """Three heads over TREE: head 0 attends from every word to its gold syntactic head; head 1 always to the word
    before; head 2 from every word to itself and, second, to the first word (self never counts)."""
    r = relations(TREE)
    n = len(r.words)
    maps = torch.zeros(1, 3, n, n)
    heads = dict(r.head)
    for i in range(n):
        maps[0, 0, i, heads.get(i, (i + 1) % n)] = 1.0
        maps[0, 1, i, max(i - 1, 0) if i else 1] = 1.0
        maps[0, 2, i, i], maps[0, 2, i, 0 if i else 1] = 0.9, 0.1
    scores = head_scores([maps], [r])
    head = scores["head"]
    # ten words have a head (bark is the root); head 1 is right for near -> bark (the word before) and for the
    # first "the", which it sends to word 1, dogs; head 2's other word is "the" (word 0), wrong for all but the
    # first "the" (sent to dogs)
    assert head["n"] == 10 and head["scores"][0] == pytest.approx([100.0, 20.0, 10.0])
    assert head["offset"] == 1 and head["offset_score"] == pytest.approx(40.0)     # the/the/the/cat -> the next
    assert head["chance"] == pytest.approx(100.0 / (n - 1))
    subj = scores["subject"]
    assert subj["n"] == 2 and subj["scores"][0][1] == pytest.approx(50.0)     # sees -> cat is the word before
    long = scores["subject_long"]
    assert long["n"] == 1 and long["offset"] == -5 and long["offset_score"] == pytest.approx(100.0)
    assert scores["antecedent"]["scores"][0][1] == pytest.approx(100.0)        # that -> dogs, the word before


def _model():
    torch.manual_seed(0)
    return build_model(small(n_heads=4)).eval()


def _batch():
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, 40, (2, 7), generator=g)
    src[1, 5:] = 0
    return src, torch.randint(4, 40, (2, 5), generator=g)


def test_with_no_head_masked_the_hook_leaves_the_output_bit_identical():
    model = _model()
    src, tgt = _batch()
    with torch.no_grad():
        plain = model(src, tgt)
        with HeadMask(model, []) as mask:
            hooked = model(src, tgt)
        assert len(mask.handles) == len(attention_layers(model))
        after = model(src, tgt)
    assert torch.equal(plain, hooked) and torch.equal(plain, after)


def test_masking_a_head_is_zeroing_its_columns_of_w_o():
    model = _model()
    src, tgt = _batch()
    for kind in ("enc", "dec", "cross"):
        head = Head(kind, 1, 2)
        with torch.no_grad():
            with HeadMask(model, [head]):
                masked = model(src, tgt)
            attn = next(a for k, i, a in attention_layers(model) if (k, i) == (kind, 1))
            saved = attn.out_proj.weight.clone()
            attn.out_proj.weight[:, 2 * attn.d_v:3 * attn.d_v] = 0.0
            reference = model(src, tgt)
            attn.out_proj.weight.copy_(saved)
            assert not torch.allclose(masked, model(src, tgt))
        torch.testing.assert_close(masked, reference)


def test_uniform_attention_equals_a_hand_written_reference():
    """Encoder layer 0, head 1 made uniform: the layer's output is Concat(heads) W^O + b with head 1's softmax
    replaced by 1/(real keys) over the real keys, computed here from the layer's projections by hand."""
    model = _model()
    src, _ = _batch()
    attn = model.encoder.layers[0].self_attn.sublayer
    seen = {}
    with torch.no_grad():
        with UniformHeads(model, [Head("enc", 0, 1)]):       # the probe's hook first, then this one sees its output
            handle = attn.register_forward_hook(lambda m, args, kwargs, out: seen.update(
                x=args[0] if args else kwargs["x"], out=out), with_kwargs=True)
            model.encode(src)
            handle.remove()
    x, got = seen["x"], seen["out"]
    d = attn.d_k
    q, k, v = attn.qkv_proj(x).split((4 * d, 4 * d, 4 * attn.d_v), -1)
    split = lambda t: t.view(2, -1, 4, t.size(-1) // 4).transpose(1, 2)     # noqa: E731
    q, k, v = split(q), split(k), split(v)
    keep = (src != 0)[:, None, None, :]
    p = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~keep, float("-inf")).softmax(-1)
    uniform = keep.float().expand_as(p) / keep.float().sum(-1, keepdim=True)
    p = torch.cat([p[:, :1], uniform[:, 1:2], p[:, 2:]], 1)
    heads = (p @ v).transpose(1, 2).reshape(2, -1, 4 * attn.d_v)
    torch.testing.assert_close(got, attn.out_proj(heads), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="encoder heads only"):
        UniformHeads(model, [Head("dec", 0, 0)])


def test_pruning_share_and_rank_correlation():
    curve = [{"masked": k, "bleu": b} for k, b in enumerate([50.0, 50.5, 49.2, 49.0, 48.5, 45.0, 49.9])]
    assert prunable(curve, 6) == pytest.approx(3 / 6)    # 49.0 is within 1 of 50.0, 48.5 is not: 3 masked
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, abs=1e-6)   # ties at mean ranks
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_word_index_groups_pieces_into_words():
    class Pieces:
        pieces = {1: "\u2581the", 2: "\u2581do", 3: "gs", 4: "\u2581bark", 5: "\u2581."}

        class sp:
            pass
    tok = Pieces()
    tok.sp.id_to_piece = lambda i: Pieces.pieces[i]
    assert word_index(tok, [1, 2, 3, 4, 5], 4) == [0, 1, 1, 2, 3]
    assert word_index(tok, [1, 2, 3, 4, 5], 5) is None


@pytest.mark.slow
def test_a_trained_run_probes_its_heads_and_the_cli_and_the_report_agree(tmp_path, capsys, monkeypatch):
    """train.heads_sentences: the run's metrics hold the heads_* figures and heads.json the rest; `probe heads
    RUN_DIR` on the finished run gives the same figures and draws Figures 3-5; the report's section reads the
    payload and draws them again."""
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.heads_sentences=16", steps=60)
    run = tmp_path / "run"
    payload = json.loads((run / "heads.json").read_text())
    assert metrics["heads_sentences"] == 16 and payload["rank_sentences"] == 8
    assert len(payload["heads"]) == 3 * 2 * 4 and payload["evaluations"] == 1 + 24 + 8 + 9 + 25
    assert [p["masked"] for p in payload["curves"]["enc"]] == list(range(9))
    assert 0 <= metrics["heads_prunable_enc"] <= 1 and -1 <= metrics["heads_rho_zero"] <= 1
    assert main(["probe", "heads", str(run), "--sentences", "16", "--device", "cpu", "--out", str(tmp_path / "probe"),
                 "--json"]) == 0
    probed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    same = lambda m: {k: v for k, v in m.items() if k.startswith("heads_") and k != "heads_seconds"}   # noqa: E731
    assert same(probed) == pytest.approx(same(metrics), nan_ok=True)
    assert {p.name for p in (tmp_path / "probe").iterdir()} >= {"heads.json", "heads_figure5.png", "heads_heatmaps.png"}

    from harness.report import heads as report
    monkeypatch.setattr(report.logged, "artifact_json", lambda uri, run_id, name: payload)
    runs = pd.DataFrame({"run_id": ["r0"], "status": ["FINISHED"], "tags.seed": ["0"], "tags.row": ["base"],
                         "tags.profile": ["tiny"],
                         "metrics.heads_sentences": [16.0], "metrics.heads_base_nll": [metrics["heads_base_nll"]],
                         "metrics.heads_prunable_enc": [metrics["heads_prunable_enc"]],
                         "metrics.heads_prunable_all": [metrics["heads_prunable_all"]]})
    (tmp_path / "report").mkdir()
    drawn = record_figures(monkeypatch)
    lines, plots = report.heads_section(runs, "sqlite:///unused", tmp_path / "report", "heads",
                                        "train.heads_sentences")
    assert_titled_by_study(drawn, ["heads"])
    assert {name for name, _ in drawn} == {f"heads_{k}.png" for k in ("figure3", "figure4", "figure5", "heatmaps",
                                                                       "ablation")}
    assert lines[0].startswith("## Attention heads") and all(p.is_file() for p in plots)
    assert any(line.startswith("| verb → its subject |") for line in lines)
    assert sum(line.startswith("| L") for line in lines) == 8                # the encoder's 2 x 4 heads


def test_the_probe_refuses_real_text_and_other_families_in_one_sentence(tmp_path, capsys):
    from tests.helpers import real_text_run
    run = real_text_run(tmp_path)
    assert main(["probe", "heads", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gold trees" in err and not (run / "heads").exists()
    assert main(["train", "--set", "model.family=rnn", "--set", "train.heads_sentences=8", "--out",
                 str(tmp_path / "rnn")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rnn family" in err and not (tmp_path / "rnn").exists()


def test_threshold_claims_hold_fail_or_stay_open_by_their_interval():
    from harness.report.verdicts import check_claims
    def verdicts(rho, prunable, gain):
        runs = pd.DataFrame({"status": ["FINISHED"] * 3, "tags.row": ["base"] * 3, "tags.seed": ["0", "1", "2"],
                             "metrics.heads_rho_zero": rho, "metrics.heads_prunable_enc": prunable,
                             "metrics.heads_subject_long_gain": gain})
        return {c["id"]: c["verdict"] for c in check_claims("heads", runs)}
    assert verdicts([0.4, 0.5, 0.45], [0.2, 0.25, 0.3], [-5.0, 30.0, 10.0]) == {
        "heads_attention_predicts_importance": "holds", "heads_mostly_prunable": "contradicted",
        "heads_track_long_agreement": "inconclusive"}
    assert verdicts([0.4, None, None], [0.9, 0.8, 0.85], [40.0, 41.0, 45.0]) == {
        "heads_attention_predicts_importance": "inconclusive", "heads_mostly_prunable": "holds",
        "heads_track_long_agreement": "holds"}


def test_several_heads_from_one_word_end_side_by_side():
    """Figure 3's eight heads drew their lines from one word onto the same points, and the translucent colours
    blended into greys no legend entry matched: each head's lines now end at its own place under the word, in
    head order, within the word's slot."""
    from matplotlib.figure import Figure

    from harness.report.heads import draw_lines
    words = ["a", "b", "c"]
    maps = [[[0.0, 0.0, 0.0], [0.5, 0.25, 0.25], [0.0, 0.0, 0.0]]] * 3
    ax = Figure().add_subplot()
    draw_lines(ax, words, maps, [0, 1, 2], word=1)
    ends = {}
    for line in ax.get_lines():
        xs, ys = line.get_data()
        if len(xs) == 2:
            ends.setdefault(line.get_color(), []).append(xs[1])
    assert len(ends) == 3                                               # a colour a head
    for j in range(3):                                                  # under word j: one end a head, apart
        under = sorted(x[j] for x in ends.values())
        assert len(set(under)) == 3 and all(abs(x - j) < 0.5 for x in under)
    single = Figure().add_subplot()
    draw_lines(single, words, maps[:1], [0])                            # one head, every word: on the word itself
    assert all(line.get_data()[0][1] in (0, 1, 2) for line in single.get_lines() if len(line.get_data()[0]) == 2)
