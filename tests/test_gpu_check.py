"""The GPU check script stays runnable: its quick CPU form runs every step and writes its figures."""

import json

import pytest

from harness.bench import gpu_check


@pytest.mark.slow
def test_quick_gpu_check_runs_every_step_on_a_cpu(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--quick"]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["failed"] == {} and report["skipped"] == []
    assert set(report["steps"]) == {"parity", "profile", "bench cpu_d128", "bench cpu_d128 varied lengths",
                                    "train cpu_d128 packed", "train cpu_d128 compiled, shape buckets"}
    assert report["steps"]["parity"]["ok"] is True
    assert report["steps"]["parity"]["graph_captured"] is False              # no CUDA: the static step, eager
    assert report["steps"]["parity"]["decoder_only_graph_captured"] is False
    assert report["steps"]["parity"]["decoder_only_graph_beam_equal"] is True
    assert "aten::mm" in report["steps"]["profile"]["table"]
    varied = report["steps"]["bench cpu_d128 varied lengths"]["training"]
    assert varied["core (packed)"]["tgt_tokens_per_s"] > 0
    assert report["steps"]["train cpu_d128 packed"]["padding_fraction"] == 0.0
    assert report["steps"]["train cpu_d128 compiled, shape buckets"]["batch_shapes"] >= 1
    assert "parity ok: True" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.json", "gpu_check.md"]
