"""The model core: plain PyTorch, importing nothing from the harness."""

from .attention import KVCache, MultiHeadAttention, reference_attention
from .config import PRESETS, ConfigError, TransformerConfig, get_preset
from .decode import beam_search, greedy
from .transformer import Transformer, count_parameters

__all__ = ["KVCache", "MultiHeadAttention", "reference_attention", "PRESETS", "ConfigError",
           "TransformerConfig", "get_preset", "beam_search", "greedy", "Transformer", "count_parameters"]
