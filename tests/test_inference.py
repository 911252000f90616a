"""The inference probe (harness/probes/inference.py), its study kind and its report: every point measured, the
cache read from its tensors equal to the formula for every shape and attention kind, the study file resolved into
its shapes, bad settings refused in one sentence, and the report's table and plots from a store."""

import json

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from harness.cli import main
from harness.probes.inference import flat_metrics, kv_formula, measure, model_config
from harness.probes.inference_spec import InferenceSpec
from harness.study.kinds import load_study
from harness.trial import Trial
from tests.helpers import assert_titled_by_study, new_store, record_figures

SMALL = dict(preset="cpu_d128", width=0.25, depth=0.5, vocab_size=60, batches=(1, 2), src_lens=(3, 5),
             new_tokens=3, repeats=1, warmup=0, threads=1, device="cpu")
SHAPES = {"encdec_mha": (), "encdec_gqa": (("n_kv_heads", 2),), "prefix_mqa": (("family", "decoder_only"),
          ("n_kv_heads", 1), ("n_layers", 4)), "redesign_gqa": (("family", "decoder_only"), ("n_layers", 4),
          ("positional", "rope"), ("norm_position", "pre"), ("norm", "rms"), ("ffn", "swiglu"), ("n_kv_heads", 2))}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_point_is_measured_and_the_cache_is_the_formulas(shape):
    spec = InferenceSpec(**SMALL, model=SHAPES[shape])
    seen = []
    result = measure(spec, seen.append)
    assert [(p["batch"], p["src_len"]) for p in result["points"]] == [(1, 3), (1, 5), (2, 3), (2, 5)] and seen
    cfg = model_config(spec)
    formula = kv_formula(cfg, 4)                                        # float32
    assert result["formula"] == formula
    for p in result["points"]:
        assert p["prefill_tok_s"] > 0 and p["decode_tok_s"] > 0 and p["ttft_ms"] > 0
        assert p["kv_bytes_per_token"] == formula["kv_bytes_per_token"]
        assert p["kv_bytes_per_source_token"] == formula["kv_bytes_per_source_token"]
    heads = dict(SHAPES[shape]).get("n_kv_heads", cfg.n_heads)
    layers = cfg.n_layers if cfg.family == "decoder_only" else cfg.n_dec_layers
    assert formula["kv_bytes_per_token"] == 2 * layers * heads * cfg.d_k * 4        # 2 x layers x kv_heads x d x bytes
    flat = flat_metrics(result)
    assert flat["decode_tok_s_b2_s5"] == result["points"][-1]["decode_tok_s"] and flat["params"] == result["params"]


def test_width_and_depth_scale_the_shape():
    cfg = model_config(InferenceSpec(preset="paper_base", width=0.25, depth=0.5,
                                     model=(("family", "decoder_only"), ("n_layers", 12), ("d_ff", 2560))))
    assert (cfg.family, cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.d_k) == ("decoder_only", 128, 640, 6, 16)
    enc_dec = model_config(InferenceSpec(preset="paper_base", width=0.25, depth=0.5))
    assert (enc_dec.d_model, enc_dec.n_enc_layers, enc_dec.n_dec_layers) == (128, 3, 3)


def test_the_study_file_resolves_its_shapes_and_round_trips():
    study = load_study("studies/inference.yaml", "tiny")
    trials = {t.row: t for t in study.trials if t.seed == 0}
    assert len(trials) == 10 and len(study.trials) == 30            # three seeds: repeats of the measurement
    assert model_config(trials["encdec_int8"].probe).kv_cache_dtype == "int8"
    kv = {row: model_config(t.probe).n_kv_heads for row, t in trials.items()}
    assert kv["encdec_mha"] == kv["prefix_mha"] == kv["redesign_mha"] == 8
    assert kv["encdec_gqa"] == kv["redesign_gqa"] == 2 and kv["prefix_mqa"] == 1
    assert model_config(trials["redesign_mqa"].probe).ffn == "swiglu"
    t = trials["prefix_gqa"]
    back = Trial.from_dict(json.loads(json.dumps(t.to_dict())), InferenceSpec)
    assert back == t and back.config_hash == t.config_hash


def test_bad_probe_settings_are_one_sentence(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    text = open("studies/inference.yaml").read()
    path.write_text(text.replace("encdec_gqa: {model: {n_kv_heads: 2}}", "encdec_gqa: {model: {n_kv_heads: 3}}"))
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "n_kv_heads=3 must divide n_heads=8" in err and len(err.strip().splitlines()) == 1
    path.write_text(text.replace("new_tokens: 32", "new_tokens: 32, batchs: [1]"))
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "batchs" in err and "did you mean batches" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_probe_inference_prints_each_point(capsys):
    assert main(["probe", "inference", "--rows", "encdec_mqa,prefix_mqa", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"encdec_mqa", "prefix_mqa"} and len(out["prefix_mqa"]["points"]) == 6


def test_the_report_tables_every_point_and_draws_its_plots(tmp_path, monkeypatch):
    from harness.report.writers import write_report
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp = client.create_experiment("inference")
    parent = client.create_run(exp, tags={"study": "inference", "version": "1", "profile": "tiny", "git_sha": "abc",
                                          "git_dirty": "False", "kind": "study", "command": "python -m harness run "
                                          "studies/inference.yaml", "hardware": "test", "started": "2026"}).info.run_id
    client.log_batch(parent, params=[Param("rows", "encdec_mha,prefix_mha"), Param("seeds", "0")])
    for row, family, per_token in (("encdec_mha", "transformer", 3072), ("prefix_mha", "decoder_only", 6144)):
        run = client.create_run(exp, tags={"kind": "trial", "mlflow.parentRunId": parent, "row": row, "seed": "0",
                                           "trial_kind": "inference", "trial_key": f"{row}-s0",
                                           "profile": "tiny"}).info.run_id
        settings = {"family": family, "d_model": "128", "n_heads": "8", "n_kv_heads": "8", "d_k": "16", "d_v": "16",
                    "n_layers": "6" if family == "decoder_only" else "3", "n_enc_layers": "3", "n_dec_layers": "3",
                    "max_len": "1024", "positional": "sinusoid", "norm": "layer", "norm_position": "post",
                    "ffn": "relu", "d_ff": "512", "lm": "prefix"}
        ms = [
            ("params", 1.5e6),
            ("kv_bytes_per_token_formula", per_token),
            ("kv_bytes_per_source_token_formula", per_token),
        ]
        for b in (1, 8):
            for s in (16, 64):
                ms += [
                    (f"decode_tok_s_b{b}_s{s}", 1000.0 * b / s),
                    (f"prefill_tok_s_b{b}_s{s}", 5e4),
                    (f"ttft_ms_b{b}_s{s}", s / 10),
                    (f"peak_mem_bytes_b{b}_s{s}", 3 * 2**20),
                    (f"kv_bytes_per_token_b{b}_s{s}", per_token),
                    (f"kv_bytes_per_source_token_b{b}_s{s}", per_token),
                ]
        client.log_batch(
            run,
            params=[Param("probe.new_tokens", "32"), *(Param(f"model.{k}", v) for k, v in settings.items())],
            metrics=[Metric(k, float(v), 0, 0) for k, v in ms],
            tags=[RunTag("device", "cpu"), RunTag("dtype", "float32")],
        )
        client.set_terminated(run, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    drawn = record_figures(monkeypatch)
    paths = write_report("inference", tmp_path / "reports", uri)
    assert_titled_by_study(drawn, ["inference"])
    assert {name for name, _ in drawn} == {"inference_decode.png", "inference_ttft.png"}
    text = (tmp_path / "reports" / "inference.md").read_text()
    assert "| **prefix_mha** | 1,500,000 | 8 | 64 | 50,000 | 125 | 6.4 | 3 | 6,144 | 6,144 | 6,144 | 6,144 |" in text
    assert "decoder-only (PrefixLM)" in text and "encoder-decoder" in text
    assert {p.name for p in paths} >= {"inference.md", "inference.csv", "inference_decode.png", "inference_ttft.png"}


def test_the_claims_figures_are_read_from_the_points():
    """summary_metrics: decode tokens/s at the last point, the cache over a full-head cache's (measured over the
    formula), and decode's batch gain over prefill's at the longest source."""
    from harness.probes.inference import summary_metrics
    points = [{"batch": b, "src_len": s, "decode_tok_s": d, "prefill_tok_s": pf, "kv_bytes_per_token": 1536.0}
              for b, s, d, pf in ((1, 16, 100.0, 1000.0), (1, 64, 90.0, 2000.0), (8, 16, 700.0, 3000.0),
                                  (8, 64, 640.0, 4000.0))]
    got = summary_metrics({"points": points, "kv_heads_fraction": 0.25,
                           "formula_mha": {"kv_bytes_per_token": 6144}})
    assert got["decode_tok_s_last"] == 640.0 and got["kv_fraction_of_mha"] == 0.25
    assert got["decode_batch_gain"] == 640 / 90 / 8 and got["prefill_batch_gain"] == 4000 / 2000 / 8
    assert got["decode_over_prefill_gain"] == (640 / 90) / (4000 / 2000)


def test_rows_of_equal_values_show_as_nested_markers():
    """The KV panel's rows of one cache size drew one line over another, four of ten legend entries with no line to
    be seen (issue 44): each row has its own hollow marker, smaller than the row before it."""
    from harness.report.inference import _nested
    styles = [_nested(k) for k in range(10)]
    assert len({s["marker"] for s in styles}) == 10 and all(s["mfc"] == "none" for s in styles)
    sizes = [s["ms"] for s in styles]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 10
