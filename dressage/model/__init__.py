"""The project's own tiny models, built offline (no download): a standard Hugging Face Llama
(`builtin:tiny`, `tiny`) and a Qwen3-MoE (`builtin:tiny-moe`, `tiny_moe`) sharing one
character-level tokenizer and chat template (`tokenizer`), and the warm start that teaches a
model a task's answer format before RL (`warmstart`).

Importing this package does not import torch; building a model does.
"""

from dressage.model.names import BUILTIN_NAMES, parse_builtin
from dressage.model.tiny import (
    BUILTIN_TINY,
    TinyModelConfig,
    build_tiny_model,
    default_cache_dir,
    resolve_model_source,
)
from dressage.model.tiny_moe import BUILTIN_TINY_MOE, TinyMoeConfig, build_tiny_moe_model
from dressage.model.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_TINY",
    "BUILTIN_TINY_MOE",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TinyModelConfig",
    "TinyMoeConfig",
    "build_tiny_model",
    "build_tiny_moe_model",
    "default_cache_dir",
    "parse_builtin",
    "resolve_model_source",
]
