"""The project's own tiny model, built offline (no download): a standard Hugging Face Llama
checkpoint with a character-level tokenizer and a chat template (`tiny`, `tokenizer`), and the
warm start that teaches it a task's answer format before RL (`warmstart`).

Importing this package does not import torch; building a model does.
"""

from dressage.model.tiny import (
    BUILTIN_TINY,
    TinyModelConfig,
    build_tiny_model,
    default_cache_dir,
    resolve_model_source,
)
from dressage.model.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS

__all__ = [
    "BUILTIN_TINY",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TinyModelConfig",
    "build_tiny_model",
    "default_cache_dir",
    "resolve_model_source",
]
