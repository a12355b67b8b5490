"""Build the project's tiny MoE offline: a standard Hugging Face `Qwen3MoeForCausalLM` checkpoint
(`builtin:tiny-moe`) with the tiny model's tokenizer and chat template.

Two decoder layers, each with 8 experts of which the router picks 2 per token (probabilities
renormalised over the two, `norm_topk_prob`, as Qwen3-30B-A3B does), q/k RMS norms per head,
untied embeddings. Weights come from a seeded generator, so a seed always gives byte-identical
`model.safetensors`, scaled like the dense tiny model's (unit-variance embeddings,
1/sqrt(fan_in) projections, a doubled LM head); the router's 1/sqrt(fan_in) init gives router
logits of about unit spread, so routing is neither uniform nor stuck on one expert.

The experts are written one by one (`mlp.experts.{e}.gate_proj.weight`, ...), the layout of the
Hub's Qwen3-MoE checkpoints and the one `transformers` writes back with `save_pretrained`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from dressage.model.tokenizer import (
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    build_tokenizer_files,
)

BUILTIN_TINY_MOE = "builtin:tiny-moe"


@dataclasses.dataclass(frozen=True)
class TinyMoeConfig:
    """Shape of the tiny MoE (head_dim 64, as the dense tiny model, for GPU attention kernels)."""

    hidden_size: int = 128
    intermediate_size: int = 256
    """Width of a dense feed-forward (`mlp_only_layers`; none by default)."""
    moe_intermediate_size: int = 64
    num_experts: int = 8
    num_experts_per_tok: int = 2
    norm_topk_prob: bool = True
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    mlp_only_layers: tuple[int, ...] = ()
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


def hf_config(cfg: TinyMoeConfig, vocab_size: int) -> dict[str, object]:
    """The `config.json` of a `Qwen3MoeForCausalLM` with this shape (Hub key names)."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "num_experts": cfg.num_experts,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "norm_topk_prob": cfg.norm_topk_prob,
        "decoder_sparse_step": 1,
        "mlp_only_layers": list(cfg.mlp_only_layers),
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
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
    }


def weight_shapes(cfg: TinyMoeConfig, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Hugging Face parameter names of the checkpoint and their shapes."""
    h, q = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    kv, d = cfg.num_key_value_heads * cfg.head_dim, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, h)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (d,),
            p + "self_attn.k_norm.weight": (d,),
            p + "post_attention_layernorm.weight": (h,),
        }
        if i in cfg.mlp_only_layers:
            m = cfg.intermediate_size
            experts = {"mlp.": m}
        else:
            shapes[p + "mlp.gate.weight"] = (cfg.num_experts, h)
            m = cfg.moe_intermediate_size
            experts = {f"mlp.experts.{e}.": m for e in range(cfg.num_experts)}
        for prefix, width in experts.items():
            shapes |= {
                p + prefix + "gate_proj.weight": (width, h),
                p + prefix + "up_proj.weight": (width, h),
                p + prefix + "down_proj.weight": (h, width),
            }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (vocab_size, h)}
    return shapes


def build_tiny_moe_model(
    out_dir: Path,
    *,
    seed: int = 0,
    vocab: Sequence[str] | None = None,
    config: TinyMoeConfig | None = None,
) -> Path:
    """Write a complete checkpoint directory into `out_dir` and return it (the files of
    `build_tiny_model`: config, generation config, weights, tokenizer and chat template)."""
    import torch
    from safetensors.torch import save_file

    cfg = config or TinyMoeConfig()
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
