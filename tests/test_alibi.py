"""ALiBi (Press et al. 2022) as a `positional` value: its slopes, its bias, and a model that uses it decoding as
it trains."""

import pytest
import torch

from model import ConfigError, Transformer
from model.layers import ALiBi, alibi_slopes
from tests.helpers import small


def test_the_slopes_are_the_papers():
    # Press et al., §3: "For a model with 8 heads, our slopes are the geometric sequence 1/2^1, 1/2^2, ..., 1/2^8";
    # for 16 heads, 1/2^0.5, 1/2^1, ..., 1/2^8.
    assert alibi_slopes(8) == [2.0 ** -i for i in range(1, 9)]
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-i / 2) for i in range(1, 17)])
    # Not a power of two: the 4-head slopes, then every other one of the 8-head sequence (their code's rule).
    assert alibi_slopes(6) == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]


def test_the_bias_is_minus_slope_times_distance():
    alibi = ALiBi(small(n_heads=4, positional="alibi"))
    bias = alibi(torch.arange(3), torch.arange(5))
    assert bias.shape == (4, 3, 5)
    for h, m in enumerate(alibi_slopes(4)):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-m * abs(i - j))


def test_positions_reach_the_model_only_through_the_bias():
    """With ALiBi the embeddings carry no position: a model whose slopes are zeroed no longer tells a source from
    its permutation (encoder self-attention is then permutation-equivariant), and with them it does."""
    torch.manual_seed(0)
    model = Transformer(small(positional="alibi", p_drop=0.0)).eval()
    src = torch.randint(4, 40, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    tgt = torch.randint(4, 40, (1, 4))
    with torch.no_grad():
        assert not torch.allclose(model(src, tgt), model(src[:, perm], tgt), atol=1e-4)
        for module in model.modules():
            if isinstance(module, ALiBi):
                module.slopes.zero_()
        assert torch.allclose(model(src, tgt), model(src[:, perm], tgt), atol=1e-5)


def test_a_sentence_decodes_as_it_would_alone_whatever_the_padding():
    from model import greedy
    torch.manual_seed(0)
    model = Transformer(small(positional="alibi", p_drop=0.0)).eval()
    src = torch.randint(4, 40, (3, 8))
    src[1, 4:] = 0
    tgt = torch.randint(4, 40, (3, 5))
    assert torch.allclose(model.hidden(src, tgt)[1], model.hidden(src[1:2, :4], tgt[1:2])[0], atol=1e-5)
    assert greedy(model, src, 2, 3, max_extra=6)[1] == greedy(model, src[1:2, :4], 2, 3, max_extra=6)[0]


def test_settings_alibi_cannot_take_are_refused():
    with pytest.raises(ConfigError, match="word_positions .* not alibi"):
        small(positional="alibi", word_positions=True)
    from model.decoder_only import DecoderOnlyConfig
    with pytest.raises(ConfigError, match="encoder-decoder only"):
        DecoderOnlyConfig(positional="alibi")
    model = Transformer(small(positional="alibi"))
    from model.attention import Packed
    p = Packed.of(torch.tensor([3, 2]))
    with pytest.raises(ValueError, match="needs padded batches"):
        model.hidden(torch.randint(4, 40, (1, 5)), torch.randint(4, 40, (1, 5)), (p, p))


def test_training_packed_batches_with_alibi_is_one_sentence(tmp_path, capsys):
    from harness.cli import main
    code = main(["train", "--set", "positional=alibi", "--set", "pack=true", "--set", "steps=1",
                 "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "alibi needs padded batches" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()                             # refused before anything is written


@pytest.mark.slow
def test_a_run_is_scored_on_length_buckets_past_its_training_lengths(capsys, tmp_path):
    from harness.cli import main
    from tests.helpers import train_small
    metrics, resolved = train_small(main, capsys, tmp_path, "transformer", "d_model=32", "d_ff=64", "n_heads=4",
                                    "n_layers=2", "positional=alibi", "length_sentences=6", steps=30)
    # data.max_words 12: the training lengths, then steps of 6 words up to 36.
    assert [(metrics[f"len_b{i}_lo"], metrics[f"len_b{i}_hi"]) for i in range(5)] == \
        [(1, 12), (13, 18), (19, 24), (25, 30), (31, 36)]
    for i in range(5):
        assert metrics[f"len_b{i}_n"] == 6 and metrics[f"len_b{i}_ppl"] > 1 and 0 <= metrics[f"len_b{i}_bleu"] <= 100
        assert 0 <= metrics[f"len_b{i}_agree"] <= 100


def test_length_buckets_draw_each_range_from_the_corpus_grammar():
    from harness.data.corpus import DataConfig
    from harness.data.synth import length_buckets, synth_config
    from harness.eval.extrapolation import bucket_bounds
    cfg = DataConfig(name="synth", lexicon_scale=0.05, max_depth=2, max_words=12)
    assert bucket_bounds(12) == [(1, 12), (13, 18), (19, 24), (25, 30), (31, 36)]
    buckets = length_buckets(20, 0, synth_config(cfg), bucket_bounds(12))
    for b in buckets:
        assert len(b.src) == len(b.tgt) == 20 and all(b.lo <= len(s.split()) <= b.hi for s in b.src)
        assert b.contrasts and all(c.src in b.src for c in b.contrasts)
    again = length_buckets(20, 0, synth_config(cfg), bucket_bounds(12))
    assert [b.src for b in again] == [b.src for b in buckets]                   # a function of the seed


def test_length_extrapolation_is_refused_off_the_made_up_corpus(tmp_path, capsys):
    from harness.cli import main
    code = main(["train", "--data", str(tmp_path / "wmt"), "--set", "length_sentences=5", "--set", "steps=1",
                 "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "needs the made-up corpus" in err and len(err.strip().splitlines()) == 1


def test_the_report_tables_each_bucket_and_marks_the_trained_lengths(tmp_path):
    import pandas as pd

    from harness.report.extrapolation import length_section
    runs = []
    for row, drop in (("base", 2.0), ("alibi", 0.5)):
        for seed in range(2):
            rec = {"tags.row": row, "status": "FINISHED"}
            for i, (lo, hi) in enumerate([(1, 12), (13, 18), (19, 24), (25, 30), (31, 36)]):
                rec.update({f"metrics.len_b{i}_lo": lo, f"metrics.len_b{i}_hi": hi, f"metrics.len_b{i}_n": 200,
                            f"metrics.len_b{i}_ppl": 1.2 + drop * i + 0.1 * seed,
                            f"metrics.len_b{i}_bleu": 80 - 10 * drop * i, f"metrics.len_b{i}_agree": 95.0})
            runs.append(rec)
    lines, plots = length_section(pd.DataFrame(runs), ["base", "alibi"], tmp_path / "len.png")
    text = "\n".join(lines)
    assert [p.name for p in plots] == ["len.png"] and plots[0].exists()
    assert "| row | seeds | 1-12 words (trained) | 13-18 words | 19-24 words | 25-30 words | 31-36 words |" in text
    # base's perplexity in the longest bucket: 9.2 and 9.3 over the seeds (half-interval 12.71 x 0.05 = 0.64)
    assert "| **base** | 2 | 1.25 ± 0.64 | 3.25 ± 0.64 | 5.25 ± 0.64 | 7.25 ± 0.64 | 9.25 ± 0.64 |" in text
    assert "| **alibi** | 2 | 80.0 ± 0.0 | 75.0 ± 0.0 | 70.0 ± 0.0 | 65.0 ± 0.0 | 60.0 ± 0.0 |" in text
    assert length_section(pd.DataFrame([{"tags.row": "base", "status": "FINISHED"}]), ["base"], tmp_path / "x.png") \
        == ([], [])
