"""§4's long-distance agreement, measured: the made-up corpus's contrastive pairs (harness/data/synth.py
agreement_pairs), their scoring by forced decoding (harness/eval/agreement.py), the claims that compare two rows
on two metrics at once ("beats it at less cost"), and Table 2's sections on agreement and quality against compute."""

import json
import math

import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import Metric

from harness.cli import main
from harness.data.corpus import DataConfig
from harness.data.synth import Marked, agreement_pairs, lexicon, synth_config
from harness.data.synth.sentences import _stream
from harness.eval.agreement import BUCKETS, bucket_name, sequence_logprobs, summarize, wilson
from harness.report import verdicts
from harness.report.claim_kinds import compare
from harness.report.rivals import at_budget
from harness.report.stats import interval
from harness.report.writers import write_report
from tests.helpers import assert_titled_by_study, finish, new_store, record_figures, start, trial

TINY = DataConfig(lexicon_scale=0.05, max_depth=2, max_words=12)      # table2.yaml's tiny corpus settings


def test_annotating_changes_no_sentence_and_marks_only_agreements():
    """The annotating grammar draws exactly what the plain one draws: every contrastive pair's reference is a
    sentence of the same stream, and its contrast differs from it in the one agreeing word."""
    cfg = synth_config(TINY)
    plain = {(e.src, e.tgt) for e in _stream(400, 1, 3, cfg)}
    pairs = agreement_pairs(400, 1, cfg)
    assert pairs and {(p.src, p.ref) for p in pairs} <= plain
    assert {p.feature for p in pairs} == {"number", "gender"}
    for p in pairs:
        ref, alt = p.ref.split(), p.alt.split()
        assert len(ref) == len(alt) and sum(a != b for a, b in zip(ref, alt)) == 1
        assert p.distance >= 1
    assert type(pairs[0].ref) is str and not isinstance(pairs[0].alt, Marked)


def test_each_contrast_points_at_the_word_its_verb_agrees_with():
    """Read back with the lexicon: the reference's verb form has the gender and number of the noun (or pronoun)
    `distance` words to its left, and the contrast's form differs from it in exactly the feature named."""
    cfg = synth_config(TINY)
    lex = lexicon(cfg)
    _, tgt = lex.analyses()
    pronouns = {"ehr": (0, 0), "sie": (1, 0), "es": (2, 0), "sii": (2, 1)}
    checked = 0
    for p in agreement_pairs(600, 1, cfg):
        ref, alt = p.ref.split(), p.alt.split()
        k = next(i for i, (a, b) in enumerate(zip(ref, alt)) if a != b)
        _, _, _, _, g, pl = tgt[ref[k]]
        _, _, _, _, g2, pl2 = tgt[alt[k]]
        word = ref[k - p.distance]
        if word in pronouns:
            controller = pronouns[word]
        else:
            kind, i, sense, npl = tgt[word]
            assert kind == "N"
            controller = (lex.n_gender[i][sense], npl)
        assert (g, pl) == controller, p
        assert ((g2, pl2) == (g, 1 - pl)) if p.feature == "number" else (g2 != g and pl2 == pl)
        checked += 1
    assert checked > 800


def test_french_like_contrasts_flip_number_only():
    cfg = synth_config(DataConfig(lexicon_scale=0.05, max_depth=2, max_words=12, target="fr"))
    pairs = agreement_pairs(300, 1, cfg)
    assert pairs and {p.feature for p in pairs} == {"number"}
    assert any({a, b} == {"a", "ont"} for p in pairs for a, b in zip(p.ref.split(), p.alt.split()) if a != b)


def test_pairs_reach_long_distances_at_the_tiny_profile():
    """At table2.yaml's tiny settings every bucket, the long ones included, holds enough pairs for an accuracy."""
    pairs = agreement_pairs(2000, TINY.seed, synth_config(TINY))
    for lo, hi in BUCKETS:
        n = sum(lo <= p.distance and (hi is None or p.distance <= hi) for p in pairs)
        assert n >= 200, (lo, hi, n)


class _WordIds:
    """A stand-in tokenizer: each word's id from a fixed table (4 and up; 0-3 are PAD, UNK, BOS, EOS)."""

    def __init__(self, words):
        self.ids = {w: 4 + i for i, w in enumerate(sorted(set(words)))}

    def encode(self, lines):
        return [[self.ids[w] for w in line.split()] for line in lines]


def test_forced_decoding_logprobs_equal_each_familys_own_loss():
    """The probe's log p(tgt | src), summed over a batch, is minus the NLL the family's own loss reports, for every
    family (the scoring reads `hidden` and `out_proj`, which every family has)."""
    from harness.data.batching import ParallelData
    from harness.train.device import autocast_for
    from model import build_model
    from model.conv import ConvConfig
    from model.rnn import RNNConfig
    from tests.helpers import small
    src = ["the dog runs .", "a cat sees the dog ."]
    tgt = ["der hund läuft .", "eine katze sieht den hund nicht ."]
    tok = _WordIds(" ".join(src + tgt).split())
    b = ParallelData(tok.encode(src), tok.encode(tgt)).collate(torch.arange(2).numpy())
    cpu = torch.device("cpu")
    for cfg in (small(), RNNConfig(vocab_size=40, d_model=32, n_enc_layers=2, n_dec_layers=2, max_len=128, p_drop=0.0),
                ConvConfig(vocab_size=40, d_model=32, d_hidden=32, n_enc_layers=2, n_dec_layers=2, max_len=128,
                           p_drop=0.0)):
        torch.manual_seed(0)
        model = build_model(cfg).eval()
        got = sequence_logprobs(model, tok.encode(src), tok.encode(tgt), cpu, 4000, autocast_for(cpu, False))
        with torch.no_grad():
            _, nll, _ = model.loss(b.src, b.tgt_in, b.tgt_out, 0.0)
        assert sum(got) == pytest.approx(-float(nll), rel=1e-5), cfg.family
        alone = sequence_logprobs(model, tok.encode(src[1:]), tok.encode(tgt[1:]), cpu, 4000, autocast_for(cpu, False))
        assert alone[0] == pytest.approx(got[1], rel=1e-5, abs=1e-4)      # padding in the batch changes nothing


def test_a_trained_run_logs_the_probe_and_the_curve_and_the_cli_agrees(tmp_path, capsys):
    """train.agreement_sentences and train.curve_bleu_sentences: the run's metrics hold the agree_* figures and
    metrics.jsonl the curve points; `probe agreement RUN_DIR` on the finished run gives the same figures."""
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.agreement_sentences=60",
                             "train.curve_bleu_sentences=8", steps=60)
    assert metrics["agree_pairs"] > 60 and 0 <= metrics["agree_acc"] <= 100
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    curve = [r for r in rows if "curve_bleu" in r]
    assert [r["step"] for r in curve] == [20, 40, 60]
    assert curve[0]["curve_tokens"] < curve[-1]["curve_tokens"] and curve[-1]["curve_seconds"] > 0
    assert main(["probe", "agreement", str(tmp_path / "run"), "--sentences", "60", "--device", "cpu", "--json"]) == 0
    probed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert probed == {k: v for k, v in metrics.items() if k.startswith("agree_")}


def test_summary_buckets_and_interval():
    from harness.data.synth import Contrast
    pairs = [Contrast("s", "r", "a", d, f) for d, f in ((1, "number"), (2, "gender"), (4, "number"), (9, "number"),
                                                        (12, "gender"))]
    out = summarize(pairs, [True, False, True, False, True])
    assert out["agree_pairs"] == 5 and out["agree_acc"] == pytest.approx(60.0)
    assert (out["agree_n_long"], out["agree_acc_long"]) == (3, pytest.approx(200 / 3))
    assert out["agree_n_d9p"] == 2 and out["agree_acc_d9p"] == pytest.approx(50.0)
    assert math.isnan(out["agree_acc_d3"]) and out["agree_n_d3"] == 0
    assert out["agree_acc_number"] == pytest.approx(200 / 3) and out["agree_n_gender"] == 2
    assert [bucket_name(lo, hi) for lo, hi in BUCKETS] == ["d1", "d2", "d3", "d4_5", "d6_8", "d9p"]
    lo, hi = wilson(90.0, 100)
    assert 82 < lo < 90 < hi < 95


def test_probe_refuses_a_run_on_real_text_in_one_sentence(tmp_path, capsys):
    from tests.helpers import real_text_run
    run = real_text_run(tmp_path)
    assert main(["probe", "agreement", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "made-up corpus" in err


def test_a_claim_with_also_holds_only_when_both_comparisons_do():
    c = verdicts.Claim(id="x", study="table2", source="s", text="t", metric="test_bleu_tok", better="higher", a="base",
                     b={"best": ["gnmt", "convs2s"]}, expect="better",
                     also={"metric": "train_flops", "better": "lower"})
    bleu = {"base": {0: 30, 1: 31, 2: 32}, "gnmt": {0: 20, 1: 21, 2: 22}, "convs2s": {0: 25, 1: 27, 2: 26}}
    cheaper = {"base": {0: 1.0, 1: 1.0, 2: 1.0}, "convs2s": {0: 2.0, 1: 2.1, 2: 2.0}, "gnmt": {0: 0.5, 1: 0.5, 2: 0.5}}
    got = compare.verdict(c, bleu, cheaper)
    assert got["b_row"] == "convs2s" and got["verdict"] == "holds" and got["also"]["verdict"] == "holds"
    dearer = {**cheaper, "convs2s": {0: 0.5, 1: 0.6, 2: 0.55}}
    got = compare.verdict(c, bleu, dearer)
    assert (got["main_verdict"], got["also"]["verdict"], got["verdict"]) == ("holds", "contradicted", "contradicted")
    noisy = {**bleu, "base": {0: 20, 1: 31, 2: 28}}
    assert compare.verdict(c, noisy, cheaper)["verdict"] == "inconclusive"


def test_at_budget_interpolates_in_log_flops_and_in_seconds():
    curve = [(1e10, 10.0, 5.0), (1e12, 100.0, 45.0)]
    assert at_budget(curve, 1e11, 0) == pytest.approx(25.0)          # halfway in log FLOPs
    assert at_budget(curve, 55.0, 1) == pytest.approx(25.0)          # halfway in seconds
    assert at_budget(curve, 1e12, 0) == pytest.approx(45.0)
    assert math.isnan(at_budget(curve, 1e9, 0)) and math.isnan(at_budget(curve, 1e13, 0))


def test_table2_report_has_agreement_and_compute_sections_and_the_rival_claims(tmp_path, monkeypatch):
    """Three rows x three seeds, each with agreement metrics and a dev BLEU curve: the report's two sections read
    them (means with intervals, the equal-compute budget), and the four rival claims get computed verdicts."""
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp, parent = start(client, "table2", "base,gnmt,convs2s")
    # row -> (BLEU offset, FLOPs per token, agreement long accuracy per seed)
    rows = {"base": (30.0, 1.0e6, [97.0, 98.0, 97.5]), "gnmt": (10.0, 1.1e6, [95.0, 96.0, 95.6]),
            "convs2s": (20.0, 0.9e6, [90.0, 89.0, 91.0])}
    i = 0
    for row, (bleu, per_token, long_acc) in rows.items():
        for seed in range(3):
            finals = {"test_bleu": bleu + seed, "test_bleu_tok": bleu + seed, "dev_ppl": 2.0, "test_ppl": 2.1,
                      "params": 5.4e5, "steps": 400, "train_seconds": 60.0, "tokens_seen": 2.0e5,
                      "train_flops": per_token * 2.0e5, "flops_per_target_token": per_token,
                      "device_matmul_tflops": 0.09, "agree_acc": long_acc[seed] + 1, "agree_pairs": 4000,
                      "agree_acc_long": long_acc[seed], "agree_n_long": 1400}
            for lo, hi in BUCKETS:
                finals[f"agree_acc_{bucket_name(lo, hi)}"] = long_acc[seed] + (1 if lo < 4 else 0)
                finals[f"agree_n_{bucket_name(lo, hi)}"] = 300
            ms = [(k, v, 400) for k, v in finals.items()]
            for step, frac in ((200, 0.5), (400, 1.0)):     # the curve: half way and at the end
                ms += [Metric("curve_bleu", bleu * frac + seed, 0, step),
                       Metric("curve_tokens", 2.0e5 * frac, 0, step), Metric("curve_seconds", 60.0 * frac, 0, step)]
            trial(client, exp, parent, i, row, seed, "train", "FINISHED",
                  {"model.d_model": 64, "train.seed": seed, "data.name": "synth"}, ms, {"device": "cpu"})
            i += 1
    finish(client, parent, 9, 0)
    drawn = record_figures(monkeypatch)
    paths = write_report("table2", tmp_path / "reports", uri)
    assert_titled_by_study(drawn, ["table2"])            # the measurements' plots too
    text = (tmp_path / "reports" / "table2.md").read_text(encoding="utf-8")
    assert {p.name for p in paths} >= {"table2_agreement.png", "table2_bleu_vs_compute.png"}
    agree = text.split("## Long-distance agreement (§4), by distance")[1].split("## ")[0]
    assert "| **base** | 3 |" in agree and "long, 4+ (n=1400)" in agree
    mean, low, high, _ = interval([97.0, 98.0, 97.5])
    assert f"{mean:.1f} [{low:.1f}, {high:.1f}]" in agree.split("| **base** |")[1].split("\n")[0]
    compute = text.split("## Quality against compute")[1].split("## ")[0]
    budget = 0.9e6 * 2.0e5                                           # convs2s's final FLOPs, the smallest
    assert f"{budget:.2e} FLOPs" in compute
    base_line = compute.split("| **base** |")[1].split("\n")[0]
    # base at convs2s's budget: between 1e11 and 2e11 FLOPs, in log FLOPs, mean over seeds
    f = math.log(budget / 1.0e11) / math.log(2.0)
    want = sum(15.0 + s + f * 15.0 for s in range(3)) / 3
    assert f"{want:.1f} [" in base_line
    judged = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `")}
    assert "**holds**" in judged["attention_agreement_above_conv"]
    assert "**holds**" in judged["attention_agreement_above_rnn"]
    # base beats convs2s (the best rival by BLEU) but at more counted FLOPs: the cost part is contradicted
    cheaper = judged["base_beats_best_rival_cheaper"]
    assert "best of gnmt, convs2s = convs2s" in cheaper and "**contradicted**" in cheaper
    assert "both parts must hold: test_bleu_tok holds, train_flops contradicted" in cheaper
    assert "**not run**" in judged["big_above_every_rival"]
