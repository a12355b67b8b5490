"""LoRA adapters on the embedded engine: a PEFT adapter directory attached to a weight set, and
decode steps over a batch whose requests use different adapters.

An adapter is served as its own `ModelWeights`: the base's tensors, shared (not copied), plus
each adapted projection's `A` and `B` (`self_attn.q_proj.lora_A`, `.lora_B`, with `B` scaled by
`alpha / r` once at load), which `weights.project` applies as PEFT's `LoraLayer` does:
`base(x) + B(A(x)) * scaling` (no dropout when serving). Nothing is merged, so loading an
adapter costs reading its few MiB, as in SGLang, which keeps `A` and `B` in its LoRA memory
pool; the integration tests check the logprobs against PEFT's own forward.

Only what the trainer writes is read: `adapter_config.json` with `r`, `lora_alpha`,
`target_modules`, and `adapter_model.safetensors` with `base_model.model.<name>.lora_A.weight` /
`lora_B.weight` pairs. Features an adapter could ask for that this forward would not honour
(`use_rslora`, `use_dora`, bias, `modules_to_save`) are refused, naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from dressage.engine.embedded.model.decoder import Decoder, KVCache
from dressage.engine.embedded.model.weights import (
    LORA_A,
    LORA_B,
    ModelWeights,
    parameter_shapes,
    replace_weights,
)

PEFT_PREFIX = "base_model.model."


def _refuse_unsupported(config: dict[str, object], where: Path) -> None:
    for key, allowed in (("use_rslora", False), ("use_dora", False), ("bias", "none")):
        if config.get(key, allowed) not in (allowed, None):
            raise ValueError(f"{where}: adapter_config.json {key}={config[key]!r} is not served")
    if config.get("modules_to_save"):
        raise ValueError(f"{where}: adapter_config.json modules_to_save is not served")


def adapter_tensors(adapter_dir: Path, weights: ModelWeights) -> dict[str, torch.Tensor]:
    """The adapter in `adapter_dir` as weight-set tensors (`model.layers.0.self_attn.q_proj.lora_A`
    and `.lora_B`, `B` scaled), checked against `weights`' shapes; errors name file and tensor."""
    adapter_dir = Path(adapter_dir)
    config_file = adapter_dir / "adapter_config.json"
    if not config_file.is_file():
        raise ValueError(f"{adapter_dir}: no adapter_config.json (not a PEFT adapter directory)")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    _refuse_unsupported(config, adapter_dir)
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scaling = alpha / rank
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    shapes = parameter_shapes(weights.shape)
    device = weights.embed.device
    out: dict[str, torch.Tensor] = {}
    for key, a in tensors.items():
        if not key.endswith(".lora_A.weight"):
            if not key.endswith(".lora_B.weight"):
                raise ValueError(f"{adapter_dir}: tensor {key} is not a LoRA A or B matrix")
            continue
        module = key.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.weight")
        b = tensors.get(key.replace(".lora_A.", ".lora_B."))
        name = f"{module}.weight"
        if b is None or name not in shapes:
            raise ValueError(f"{adapter_dir}: tensor {key} has no B matrix or no base {name}")
        update = (b.shape[0], a.shape[1])
        if update != shapes[name] or a.shape[0] != rank or b.shape[1] != rank:
            raise ValueError(
                f"{adapter_dir}: {key} gives {name} a {update} update of rank "
                f"{a.shape[0]}, expected {shapes[name]} of rank {rank}"
            )
        out[module + LORA_A] = a.to(device=device, dtype=torch.float32).contiguous()
        out[module + LORA_B] = (scaling * b.to(device=device, dtype=torch.float32)).contiguous()
    return out


def with_adapter(adapter_dir: Path, weights: ModelWeights) -> ModelWeights:
    """`weights` serving the PEFT adapter in `adapter_dir` (a new set sharing the base's
    tensors; `weights` unchanged)."""
    return replace_weights(weights, adapter_tensors(adapter_dir, weights))


def decode_by_weights(
    decoder: Decoder,
    weights: Sequence[ModelWeights],
    cache: KVCache,
    slots: list[int],
    tokens: list[int],
    positions: list[int],
    routes: torch.Tensor | None,
) -> torch.Tensor:
    """`Decoder.decode` over rows that use different weight sets (`weights[row]`, an adapter's
    or the base's): one decode per set over its rows, logits `[B, vocab]` in row order."""
    groups: dict[int, list[int]] = {}
    for row, w in enumerate(weights):
        groups.setdefault(id(w), []).append(row)
    if len(groups) == 1:
        return decoder.decode(weights[0], cache, slots, tokens, positions, routes)
    out: torch.Tensor | None = None
    for rows in groups.values():
        part_routes = None if routes is None else torch.zeros_like(routes[rows])
        logits = decoder.decode(
            weights[rows[0]],
            cache,
            [slots[r] for r in rows],
            [tokens[r] for r in rows],
            [positions[r] for r in rows],
            part_routes,
        )
        if out is None:
            out = torch.empty((len(weights), logits.shape[-1]), dtype=logits.dtype)
        out[rows] = logits
        if routes is not None and part_routes is not None:
            routes[rows] = part_routes
    assert out is not None
    return out
