"""Build the project's tiny causal LM offline: a standard Hugging Face `LlamaForCausalLM`
checkpoint directory that `transformers`, SGLang and the embedded engine all load.

Nothing is downloaded. Weights are drawn from a seeded generator, so the same seed and config
always give byte-identical `model.safetensors`. The init is scaled (unit-variance embeddings,
1/sqrt(fan_in) projections, a doubled lm_head) so that logits spread over a few nats: greedy
decoding is then far from ties, which keeps batched and single-request greedy outputs identical
despite float rounding.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from dressage.model.names import BUILTIN_PREFIX, parse_builtin
from dressage.model.tokenizer import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    DEFAULT_VOCAB,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    build_tokenizer_files,
)

BUILTIN_TINY = "builtin:tiny"


@dataclasses.dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the tiny model. head_dim 64 keeps it within what GPU attention kernels accept."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


def hf_config(cfg: TinyModelConfig, vocab_size: int) -> dict[str, object]:
    """The `config.json` of a `LlamaForCausalLM` with this shape."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
    }


def weight_shapes(cfg: TinyModelConfig, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Hugging Face parameter names of a Llama checkpoint and their shapes."""
    h, q = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    kv, m = cfg.num_key_value_heads * cfg.head_dim, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, h)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (m, h),
            p + "mlp.up_proj.weight": (m, h),
            p + "mlp.down_proj.weight": (h, m),
        }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (vocab_size, h)}
    return shapes


def build_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    vocab: Sequence[str] | None = None,
    config: TinyModelConfig | None = None,
) -> Path:
    """Write a complete checkpoint directory into `out_dir` and return it.

    Files: config.json, generation_config.json, model.safetensors, tokenizer.json,
    tokenizer_config.json (with the chat template), special_tokens_map.json. `vocab` lists the
    plain single-character tokens (default: digits, letters, punctuation, space, newline, tab).
    """
    import torch
    from safetensors.torch import save_file

    cfg = config or TinyModelConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer_files(out_dir, vocab)
    config_json = hf_config(cfg, vocab_size)
    (out_dir / "config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    generation = {
        "bos_token_id": config_json["bos_token_id"],
        "eos_token_id": config_json["eos_token_id"],
        "pad_token_id": config_json["pad_token_id"],
    }
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")

    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in weight_shapes(cfg, vocab_size).items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape)
        elif name == "model.embed_tokens.weight":
            tensors[name] = torch.randn(shape, generator=gen)
        else:
            scale = 2.0 if name == "lm_head.weight" else 1.0
            tensors[name] = torch.randn(shape, generator=gen) * (scale * shape[1] ** -0.5)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def tokenizer_revision() -> str:
    """A short hash of what the built-in tokenizer files are made from (special tokens,
    vocabulary and chat template)."""
    import hashlib

    recipe = json.dumps([SPECIAL_TOKENS, DEFAULT_VOCAB, CHAT_TEMPLATE])
    return hashlib.sha256(recipe.encode()).hexdigest()[:8]


def default_cache_dir() -> Path:
    """Where built-in models are cached: `$DRESSAGE_CACHE_DIR` or `~/.cache/dressage`."""
    env = os.environ.get("DRESSAGE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dressage"


def builtin_models() -> dict[str, Callable[..., Path]]:
    """Every built-in model by name (`builtin:NAME`), with the function that builds it."""
    from dressage.model.tiny_moe import build_tiny_moe_model

    return {"tiny": build_tiny_model, "tiny-moe": build_tiny_moe_model}


def resolve_model_source(source: str, cache_dir: Path | None = None) -> Path:
    """Map a model source to a checkpoint directory.

    `builtin:tiny` and `builtin:tiny-moe` (optionally with `@SEED`) are built once into
    `cache_dir` and reused (the directory is named after the model, the seed and
    `tokenizer_revision()`, so a changed chat template or vocabulary builds afresh); the build
    goes to a temporary directory renamed into place, so concurrent processes never see a
    half-written checkpoint. Any other string is taken as a path.
    """
    if not source.startswith(BUILTIN_PREFIX):
        return Path(source)
    name, seed = parse_builtin(source)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "models" / f"{name}-seed{seed}-{tokenizer_revision()}"
    if (target / "model.safetensors").exists():
        return target
    root.joinpath("models").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root / "models"))
    try:
        builtin_models()[name](tmp, seed=seed)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
