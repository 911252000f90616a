"""The model core: plain PyTorch, importing nothing from the harness."""

from .attention import KVCache, MultiHeadAttention, reference_attention
from .config import PRESETS, ConfigError, TransformerConfig, get_preset
from .decode import beam_search, greedy
from .family import FAMILIES, ModelConfig, Seq2SeqModel, build_model, config_from_dict, register, to_dict, with_settings
from .transformer import Transformer, count_parameters

__all__ = ["KVCache", "MultiHeadAttention", "reference_attention", "PRESETS", "ConfigError",
           "TransformerConfig", "get_preset", "beam_search", "greedy", "Transformer", "count_parameters",
           "FAMILIES", "ModelConfig", "Seq2SeqModel", "build_model", "config_from_dict", "register", "to_dict",
           "with_settings"]
