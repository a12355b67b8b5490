"""The embedded engine's models: Hugging Face checkpoints of the Llama/Qwen/Mistral decoder
family, dense and MoE, served by an incremental decoder in float32.

- `shape`: what a `config.json` says about the architecture (`ModelShape`, `MoeShape`); the
  supported architectures are `SUPPORTED_ARCHITECTURES`.
- `weights`: the tensors by Hugging Face name (`parameter_shapes`), loading a checkpoint
  (`load_weights`) and swapping some of them (`replace_weights`).
- `moe`: the top-k router and the experts.
- `decoder`: the KV cache and the forward passes (`Decoder`), recording routed experts on
  request; a decode step attends in length buckets (`length_buckets`).

A checkpoint the trainer writes with `save_pretrained` loads here unchanged; unit tests check
the logits, and the experts each token is routed to, against `transformers`' own forward.
"""

from __future__ import annotations

from dressage.engine.embedded.model.decoder import (
    MIN_BUCKET,
    SPLIT_ABOVE,
    Decoder,
    KVCache,
    full_logits,
    length_buckets,
    new_routes,
)
from dressage.engine.embedded.model.shape import SUPPORTED_ARCHITECTURES, ModelShape, MoeShape
from dressage.engine.embedded.model.weights import (
    LayerWeights,
    ModelWeights,
    layer_shapes,
    load_weights,
    parameter_shapes,
    replace_weights,
)

__all__ = [
    "MIN_BUCKET",
    "SPLIT_ABOVE",
    "SUPPORTED_ARCHITECTURES",
    "Decoder",
    "KVCache",
    "LayerWeights",
    "ModelShape",
    "ModelWeights",
    "MoeShape",
    "full_logits",
    "layer_shapes",
    "length_buckets",
    "load_weights",
    "new_routes",
    "parameter_shapes",
    "replace_weights",
]
