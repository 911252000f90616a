"""A run's architecture manifest: what kind of model it is, in the terms one compares today's models by. Written
beside every run (architecture.json), logged to MLflow with each trial (as an artifact), and shown in the reports,
which compute it from the settings each trial logged. A function of the resolved model settings (a plain dict, the
values as config.json or MLflow's params hold them), importing nothing, so that the reports can call it.

KV-cache bytes are what incremental decoding keeps per token at bf16 (2 bytes a number; with kv_cache_dtype int8
also `kv_bytes_per_token_int8`, one byte a number and a float16 scale per head and position for keys and values):
- per generated (target) token: the self-attention keys and values every decoder layer appends,
  layers x kv_heads x (d_k + d_v) x 2; the decoder-only model's cache grows by the same for every source
  token too (its prefill), which `kv_bytes_per_source_token` counts;
- per source token: the encoder-decoder's cross-attention keys and values, computed once from the encoder's
  output for every decoder layer; the rivals' attention memory over the source (GNMT-style: the top encoder
  layer's outputs and their projected keys; ConvS2S: keys z and values z + e);
- the rivals' recurrent and convolution-window states are fixed in size (they do not grow with the tokens)
  and count 0 per token.
"""

from __future__ import annotations

BF16 = 2


def _attention_kind(n_heads: int, n_kv_heads: int) -> str:
    return "mha" if n_kv_heads == n_heads else "mqa" if n_kv_heads == 1 else "gqa"


class _Settings:
    """Attribute access to resolved settings, numbers read back from their strings (MLflow keeps params as text)."""

    def __init__(self, settings: dict):
        self._s = settings

    def __getattr__(self, name: str):
        value = self._s[name]
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return value
        return value


def manifest(settings: dict) -> dict:
    """The manifest of a model's resolved settings (`model.to_dict(cfg)`, or a trial's logged model params) of
    any registered family: plain data, strings and integers."""
    cfg = _Settings(settings)
    family = settings.get("family", "transformer")
    if family in ("transformer", "decoder_only"):
        kv = cfg.n_kv_heads * (cfg.d_k + cfg.d_v) * BF16
        decoder_only = family == "decoder_only"
        out = {
            "architecture": f"decoder-only ({'PrefixLM' if cfg.lm == 'prefix' else 'CausalLM'})" if decoder_only
            else "encoder-decoder",
            "layers": f"{cfg.n_layers}" if decoder_only else f"{cfg.n_enc_layers} + {cfg.n_dec_layers}",
            "d_model": cfg.d_model,
            "attention": _attention_kind(cfg.n_heads, cfg.n_kv_heads) + (
                f" ({settings['attention_score']} scores)" if settings.get("attention_score", "scaled") != "scaled"
                else "") + (f", sliding window {window} (a cache of at most {window + 1} tokens a layer)"
                            if (window := int(settings.get("attention_window", 0) or 0)) else ""),
            "query_heads": cfg.n_heads,
            "kv_heads": cfg.n_kv_heads,
            "head_dim": cfg.d_k if cfg.d_k == cfg.d_v else f"{cfg.d_k} (keys), {cfg.d_v} (values)",
            "context_length": cfg.max_len,
            "positions": cfg.positional + (f" (position interpolation: p / {float(scale):g})"
                                           if (scale := float(settings.get("rope_scale", 1) or 1)) != 1 else ""),
            "norm": f"{'LayerNorm' if cfg.norm == 'layer' else 'RMSNorm'}, {cfg.norm_position}-norm",
            "ffn": f"{cfg.ffn}, d_ff {cfg.d_ff}",
        }
        if settings.get("kv_cache_dtype", "model") == "int8":    # int8 rows, a float16 scale each (k and v)
            out["kv_cache"] = "int8, a float16 scale per head and position"
            layers = cfg.n_layers if decoder_only else cfg.n_dec_layers
            out["kv_bytes_per_token_int8"] = layers * (cfg.n_kv_heads * (cfg.d_k + cfg.d_v) + 2 * cfg.n_kv_heads * 2)
        if decoder_only:
            out["kv_bytes_per_target_token_bf16"] = cfg.n_layers * kv
            out["kv_bytes_per_source_token_bf16"] = cfg.n_layers * kv
        else:
            out["kv_bytes_per_target_token_bf16"] = cfg.n_dec_layers * kv
            out["kv_bytes_per_source_token_bf16"] = cfg.n_dec_layers * kv      # the cross-attention cache
        return out
    if family == "rnn":
        return {"architecture": "rnn (GNMT-style LSTMs)", "layers": f"{cfg.n_enc_layers} + {cfg.n_dec_layers}",
                "d_model": cfg.d_model, "attention": cfg.attention, "query_heads": 1, "kv_heads": 1,
                "head_dim": cfg.d_model, "context_length": cfg.max_len, "positions": "none (recurrence)",
                "norm": "none", "ffn": "none",
                "kv_bytes_per_target_token_bf16": 0,
                "kv_bytes_per_source_token_bf16": 2 * cfg.d_model * BF16}      # memory and its keys
    if family == "conv":
        return {"architecture": "conv (ConvS2S)", "layers": f"{cfg.n_enc_layers} + {cfg.n_dec_layers}",
                "d_model": cfg.d_model, "attention": "multi-step dot-product", "query_heads": 1, "kv_heads": 1,
                "head_dim": cfg.d_model, "context_length": cfg.max_len, "positions": "learned",
                "norm": "weight normalisation", "ffn": f"GLU convolutions, kernel {cfg.kernel}, width {cfg.d_hidden}",
                "kv_bytes_per_target_token_bf16": 0,
                "kv_bytes_per_source_token_bf16": 2 * cfg.d_model * BF16}      # keys z, values z + e
    return {"architecture": family}

