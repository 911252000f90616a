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
