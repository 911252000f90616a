"""Per-layer gradient norms at initialization (harness/eval/grad_norms.py, the measurement grad_norms): one norm a
layer, computed from real gradients and cleared afterwards; a run logs them at step 0, and the report draws them."""

from __future__ import annotations

import json

import torch

from harness.data.batching import ParallelData
from harness.eval.grad_norms import layer_grad_norms
from model import Transformer
from tests.helpers import small


def test_one_norm_a_layer_from_real_gradients_then_cleared():
    torch.manual_seed(0)
    model = Transformer(small(n_enc_layers=3, n_dec_layers=2))
    data = ParallelData([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])
    got = layer_grad_norms(model, data, 2, torch.device("cpu"), 0.1, lambda: torch.autocast("cpu", enabled=False))
    assert sorted(got) == ["gradnorm_dec_0", "gradnorm_dec_1", "gradnorm_enc_0", "gradnorm_enc_1", "gradnorm_enc_2"]
    assert all(v > 0 for v in got.values())
    assert all(p.grad is None for p in model.parameters())
    # the same number as the gradient computed by hand for one layer
    model.zero_grad()
    b = data.collate(torch.arange(2).numpy())
    loss, _, n = model.loss(b.src, b.tgt_in, b.tgt_out, label_smoothing=0.1)
    (loss / n).backward()
    by_hand = sum(float(p.grad.pow(2).sum()) for name, p in model.named_parameters()
                  if name.startswith("encoder.layers.2.")) ** 0.5
    assert abs(got["gradnorm_enc_2"] - by_hand) < 1e-4 * by_hand


def test_a_run_logs_them_at_step_zero(tmp_path, capsys):
    from harness.cli import main
    from tests.helpers import train_small
    train_small(main, capsys, tmp_path, "transformer", "train.grad_norms_sentences=16", "model.n_layers=2", steps=9)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and {"gradnorm_enc_0", "gradnorm_enc_1", "gradnorm_dec_1"} <= set(first)


def test_the_report_section_tables_first_and_last_layers_and_draws_them(tmp_path):
    import pandas as pd

    from harness.report.grad_norms import grad_norm_section
    runs = pd.DataFrame({"tags.row": ["post", "post", "pre", "pre"], "tags.seed": ["0", "1", "0", "1"],
                         "status": ["FINISHED"] * 4,
                         "metrics.gradnorm_enc_0": [1.0, 1.2, 2.0, 2.0], "metrics.gradnorm_enc_1": [4.0, 4.8, 2.0, 2.2],
                         "metrics.gradnorm_dec_0": [1.0, 1.0, 1.0, 1.0],
                         "metrics.gradnorm_dec_1": [3.0, 3.0, 1.0, 1.0]})
    lines, plots = grad_norm_section(runs, ["post", "pre"], tmp_path / "g.png")
    table = [ln for ln in lines if ln.startswith("| **")]
    # per row: the first and last layers' norms over seeds, and last / first seed by seed (post 4 and 3, pre 1)
    assert table[0].startswith("| **post** | 1.1 [") and "| 4.00 [4.00, 4.00] |" in table[0]
    assert table[0].endswith("| 3.00 [3.00, 3.00] |") and table[1].endswith("| 1.00 [1.00, 1.00] |")
    assert plots[0].exists() and plots[0].stat().st_size > 1000


def test_rows_with_the_same_weights_at_init_are_drawn_as_one_line_named_for_both():
    """Warmup changes training, not the initial weights: post and post_nowarmup have the same norms at init, and the
    plot draws that curve once, labelled with both rows, rather than one line hidden under the other."""
    import pandas as pd

    from harness.report.grad_norms import _curves, norms
    runs = pd.DataFrame({"tags.row": ["post", "post_nowarmup", "pre"], "tags.seed": ["0", "0", "0"],
                         "status": ["FINISHED"] * 3, "metrics.gradnorm_enc_0": [1.0, 1.0, 2.0],
                         "metrics.gradnorm_dec_0": [3.0, 3.0, 1.0]})
    curves = _curves({row: norms(runs, row) for row in ("post", "post_nowarmup", "pre")})
    assert curves == {"post, post_nowarmup": {"enc": [1.0], "dec": [3.0]}, "pre": {"enc": [2.0], "dec": [1.0]}}


def test_measuring_leaves_the_random_stream_as_it_was():
    """The backward pass runs dropout, which draws from torch's generator; its state is put back, so that a run
    that measures trains as one that does not."""
    torch.manual_seed(0)
    model = Transformer(small(p_drop=0.3))
    data = ParallelData([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    layer_grad_norms(model, data, 2, torch.device("cpu"), 0.1, lambda: torch.autocast("cpu", enabled=False))
    assert torch.equal(torch.rand(3), expected)
