"""Small configs shared by the model tests: `small()` and one override per variant field."""

from model import TransformerConfig

VARIANTS = {
    "paper": {},
    "learned": dict(positional="learned"),
    "rope": dict(positional="rope"),
    "alibi": dict(positional="alibi"),
    "unscaled": dict(attention_score="unscaled"),
    "additive": dict(attention_score="additive"),
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


def real_text_run(tmp_path):
    """A run directory whose config.json names real text (Multi30K) as its data and nothing else: what a probe
    of the made-up corpus must refuse before it reads any weights."""
    import dataclasses
    import json

    from harness.data.corpus import DataConfig
    from harness.train.config import TrainConfig
    from model import TransformerConfig
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": dataclasses.asdict(TransformerConfig()),
                                                 "train": dataclasses.asdict(TrainConfig()),
                                                 "data": dataclasses.asdict(DataConfig(name="data/multi30k-en-de"))}))
    return run


def rival_batch():
    """A padded (3, 7) source batch (two rows padded) and a (3, 6) target prefix over a 50-token vocabulary."""
    import torch
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 50, (3, 7), generator=g)
    src[1, 5:] = 0
    src[2, 3:] = 0
    return src, torch.randint(4, 50, (3, 6), generator=g)


def check_cached_decoding(m) -> None:
    """A family's cached steps are its teacher-forced decoder a token at a time, and beam search gives the same
    outputs with the cache and without it; padding does not reach the real positions of the encoder."""
    import torch

    from model import beam_search
    src, tgt = rival_batch()
    memory, mask = m.encode(src)
    full = m.out_proj(m.decode(tgt, memory, mask))
    cache = m.new_cache(3, 10, memory)
    steps = torch.stack([m.decode_step(tgt[:, t], memory, mask, cache, t) for t in range(tgt.size(1))], 1)
    assert torch.allclose(full, steps, atol=1e-5)
    assert beam_search(m, src, 1, 2, 3, max_extra=5) == beam_search(m, src, 1, 2, 3, max_extra=5, use_cache=False)
    alone, none = m.encode(src[2:3, :3])
    assert none is None and mask is not None and torch.equal(mask[:, 0, 0], src != 0)
    assert torch.allclose(alone[0], memory[2, :3], atol=1e-6)
