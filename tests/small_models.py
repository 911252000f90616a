"""Small configs shared by the model tests: `small()` and one override per variant field."""

from model import TransformerConfig

VARIANTS = {
    "paper": {},
    "learned": dict(positional="learned"),
    "rope": dict(positional="rope"),
    "pre_rms": dict(norm_position="pre", norm="rms"),
    "pre_layer": dict(norm_position="pre"),
    "gelu": dict(ffn="gelu"),
    "swiglu": dict(ffn="swiglu"),
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "dk_dv": dict(d_k=8, d_v=24),
    "unshared": dict(share_embeddings=False),
    "depths": dict(n_enc_layers=3, n_dec_layers=1),
    "attn_drop": dict(p_attn_drop=0.1),
    "modern": dict(positional="rope", norm_position="pre", norm="rms", ffn="swiglu", n_kv_heads=2),
}


def small(**overrides) -> TransformerConfig:
    return TransformerConfig(vocab_size=40, d_model=32, d_ff=64, n_heads=4, n_layers=2, max_len=128,
                             p_drop=0.0).replace(**overrides)


def train_small(main, capsys, tmp_path, family: str, *sets: str, steps: int = 120) -> tuple[dict, dict]:
    """`harness train` of a small model of `family` on a small made-up corpus (dev PPL every steps/3):
    (the final metrics, the resolved model settings of config.json)."""
    import json
    out = tmp_path / "run"
    args = ["train", "--set", f"model.family={family}", *(a for s in sets for a in ("--set", s)),
            "--set", f"train.steps={steps}", "--set", f"eval_every={steps // 3}", "--set", "max_tokens=800",
            "--set", "batch_tokens=800", "--set", "bleu_sentences=8", "--set", "max_extra=5",
            "--set", "checkpoint_every=0", "--set", "data.train_pairs=2000", "--set", "data.dev_pairs=16",
            "--set", "data.test_pairs=8", "--set", "data.lexicon_scale=0.05", "--set", "data.max_words=12",
            "--set", f"data.cache_dir={tmp_path / 'cache'}", "--out", str(out), "--quiet", "--json"]
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return metrics, json.loads((out / "config.json").read_text())["model"]
