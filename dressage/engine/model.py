"""The embedded engine's incremental decoder for Hugging Face Llama-family checkpoints.

Weights are read from `model.safetensors` (or a sharded index) by their Hugging Face names, so a
checkpoint the trainer writes with `save_pretrained` loads here unchanged. Supported:
`LlamaForCausalLM` and `Qwen2ForCausalLM` (q/k/v biases), grouped-query attention, tied or
untied embeddings, default RoPE. The math follows `transformers`' implementation (float32); a unit
test checks the logits against it.

KV cache: one preallocated tensor per layer with a row ("slot") per running request. Prefill
writes a request's prompt into its slot; a decode step advances several slots by one token at
once, each at its own position, with attention masked beyond each row's length. That is what lets
the scheduler batch requests of different lengths without padding the prompts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Everything about a checkpoint's architecture the decoder needs."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        archs = config.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise ValueError(
                f"config.json architectures {archs} not supported; "
                f"supported: {list(SUPPORTED_ARCHITECTURES)}"
            )
        rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ValueError(f"config.json rope type {rope_type!r} not supported (default only)")
        theta = config.get("rope_theta", rope.get("rope_theta", 10000.0))
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        eos = config.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        return cls(
            architecture=arch,
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias=arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias")),
            eos_token_ids=eos_ids,
            bos_token_id=config.get("bos_token_id"),
        )

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> ModelShape:
        path = Path(checkpoint) / "config.json"
        try:
            config = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path} does not exist") from None
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return cls.from_config(config)

    def same_architecture(self, other: ModelShape) -> bool:
        """Whether weights of `other` can replace ours (eos/bos labels may differ)."""
        skip = {"eos_token_ids", "bos_token_id", "max_position_embeddings"}
        return all(
            getattr(self, f.name) == getattr(other, f.name)
            for f in dataclasses.fields(self)
            if f.name not in skip
        )


@dataclasses.dataclass(frozen=True)
class LayerWeights:
    input_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_bias: torch.Tensor | None
    k_bias: torch.Tensor | None
    v_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclasses.dataclass(frozen=True)
class ModelWeights:
    """An immutable set of weights; swapping versions is replacing one reference."""

    shape: ModelShape
    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor
    lm_head: torch.Tensor


def _read_tensors(checkpoint: Path, device: torch.device) -> dict[str, torch.Tensor]:
    single = checkpoint / "model.safetensors"
    index = checkpoint / "model.safetensors.index.json"
    if single.exists():
        files = [single]
    elif index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [checkpoint / name for name in sorted(set(weight_map.values()))]
    else:
        raise ValueError(f"{checkpoint} has neither model.safetensors nor its index")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                tensors[name] = handle.get_tensor(name).to(device=device, dtype=torch.float32)
    return tensors


def load_weights(
    checkpoint: Path, shape: ModelShape | None = None, device: torch.device | str = "cpu"
) -> ModelWeights:
    """Read and check a checkpoint's weights, placed on `device`; errors name the missing or
    misshapen tensor."""
    checkpoint = Path(checkpoint)
    shape = shape or ModelShape.from_checkpoint(checkpoint)
    tensors = _read_tensors(checkpoint, torch.device(device))
    h, qd = shape.hidden_size, shape.num_heads * shape.head_dim
    kvd = shape.num_kv_heads * shape.head_dim

    def take(name: str, expected: tuple[int, ...]) -> torch.Tensor:
        tensor = tensors.get(name)
        if tensor is None:
            raise ValueError(f"{checkpoint}: tensor {name} is missing")
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{checkpoint}: tensor {name} has shape {tuple(tensor.shape)}, expected {expected}"
            )
        return tensor.contiguous()

    layers = []
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        bias = shape.attention_bias
        layers.append(
            LayerWeights(
                input_norm=take(p + "input_layernorm.weight", (h,)),
                q=take(p + "self_attn.q_proj.weight", (qd, h)),
                k=take(p + "self_attn.k_proj.weight", (kvd, h)),
                v=take(p + "self_attn.v_proj.weight", (kvd, h)),
                o=take(p + "self_attn.o_proj.weight", (h, qd)),
                q_bias=take(p + "self_attn.q_proj.bias", (qd,)) if bias else None,
                k_bias=take(p + "self_attn.k_proj.bias", (kvd,)) if bias else None,
                v_bias=take(p + "self_attn.v_proj.bias", (kvd,)) if bias else None,
                post_norm=take(p + "post_attention_layernorm.weight", (h,)),
                gate=take(p + "mlp.gate_proj.weight", (shape.intermediate_size, h)),
                up=take(p + "mlp.up_proj.weight", (shape.intermediate_size, h)),
                down=take(p + "mlp.down_proj.weight", (h, shape.intermediate_size)),
            )
        )
    embed = take("model.embed_tokens.weight", (shape.vocab_size, h))
    if "lm_head.weight" in tensors or not shape.tie_word_embeddings:
        lm_head = take("lm_head.weight", (shape.vocab_size, h))
    else:
        lm_head = embed
    return ModelWeights(
        shape=shape,
        embed=embed,
        layers=tuple(layers),
        norm=take("model.norm.weight", (h,)),
        lm_head=lm_head,
    )


_LAYER_FIELDS: dict[str, str] = {
    "input_layernorm.weight": "input_norm",
    "self_attn.q_proj.weight": "q",
    "self_attn.k_proj.weight": "k",
    "self_attn.v_proj.weight": "v",
    "self_attn.o_proj.weight": "o",
    "self_attn.q_proj.bias": "q_bias",
    "self_attn.k_proj.bias": "k_bias",
    "self_attn.v_proj.bias": "v_bias",
    "post_attention_layernorm.weight": "post_norm",
    "mlp.gate_proj.weight": "gate",
    "mlp.up_proj.weight": "up",
    "mlp.down_proj.weight": "down",
}
"""Hugging Face parameter name (after `model.layers.N.`) -> `LayerWeights` field."""


def parameter_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every parameter a checkpoint of `shape` has, by Hugging Face name, with its shape.

    `lm_head.weight` is listed for tied embeddings too: a sender may include it (a
    `state_dict` does), and it then replaces the output projection.
    """
    h, qd = shape.hidden_size, shape.num_heads * shape.head_dim
    kvd = shape.num_kv_heads * shape.head_dim
    inter = shape.intermediate_size
    per_layer: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (qd, h),
        "self_attn.k_proj.weight": (kvd, h),
        "self_attn.v_proj.weight": (kvd, h),
        "self_attn.o_proj.weight": (h, qd),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (inter, h),
        "mlp.up_proj.weight": (inter, h),
        "mlp.down_proj.weight": (h, inter),
    }
    if shape.attention_bias:
        per_layer |= {
            "self_attn.q_proj.bias": (qd,),
            "self_attn.k_proj.bias": (kvd,),
            "self_attn.v_proj.bias": (kvd,),
        }
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.vocab_size, h)}
    for i in range(shape.num_layers):
        out |= {f"model.layers.{i}.{name}": dims for name, dims in per_layer.items()}
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (shape.vocab_size, h)
    return out


def replace_weights(weights: ModelWeights, updates: dict[str, torch.Tensor]) -> ModelWeights:
    """A new `ModelWeights` with the tensors of `updates` (Hugging Face names, shapes already
    checked against `parameter_shapes`) in place of the current ones; `weights` is unchanged.

    With tied embeddings, a new `model.embed_tokens.weight` is the output projection too
    unless `updates` also has `lm_head.weight`.
    """
    layers = list(weights.layers)
    for name, tensor in updates.items():
        if not name.startswith("model.layers."):
            continue
        index, _, rest = name.removeprefix("model.layers.").partition(".")
        layers[int(index)] = dataclasses.replace(
            layers[int(index)], **{_LAYER_FIELDS[rest]: tensor}
        )
    embed = updates.get("model.embed_tokens.weight", weights.embed)
    tied_now = weights.lm_head is weights.embed
    lm_head = updates.get("lm_head.weight", embed if tied_now else weights.lm_head)
    return ModelWeights(
        shape=weights.shape,
        embed=embed,
        layers=tuple(layers),
        norm=updates.get("model.norm.weight", weights.norm),
        lm_head=lm_head,
    )


class KVCache:
    """Keys and values of every running request: `[layer][slot, kv_head, position, head_dim]`."""

    def __init__(
        self, shape: ModelShape, slots: int, max_len: int, device: torch.device | str = "cpu"
    ) -> None:
        size = (shape.num_layers, slots, shape.num_kv_heads, max_len, shape.head_dim)
        self.k = torch.zeros(size, device=device)
        self.v = torch.zeros(size, device=device)
        self.slots = slots
        self.max_len = max_len


class Decoder:
    """Forward passes over a KV cache for one model shape; weights are passed per call, so a
    weight swap between two calls is atomic from the decoder's point of view.

    The forward passes run on `device` (where the weights and the cache live); the logits they
    return are on the CPU, where sampling draws from each request's seeded generator.
    """

    def __init__(self, shape: ModelShape, max_len: int, device: torch.device | str = "cpu") -> None:
        self.shape = shape
        self.device = torch.device(device)
        d = shape.head_dim
        inv_freq = 1.0 / (
            shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
        )
        positions = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(self.device)
        self.sin = emb.sin().to(self.device)
        self.max_len = max_len

    @torch.inference_mode()
    def prefill(
        self, weights: ModelWeights, cache: KVCache, slot: int, tokens: list[int]
    ) -> torch.Tensor:
        """Run `tokens` at positions 0..T-1 into `slot`; return logits `[T, vocab]`."""
        dev = self.device
        ids = torch.tensor(tokens, dtype=torch.long, device=dev)
        t = ids.shape[0]
        positions = torch.arange(t, device=dev)
        x = weights.embed[ids].unsqueeze(0)  # [1, T, H]
        causal = torch.ones(t, t, dtype=torch.bool, device=dev).triu(1)  # True = masked
        for li, layer in enumerate(weights.layers):
            q, k, v = self._qkv(layer, x, positions.unsqueeze(0))  # [1, heads, T, d]
            cache.k[li, slot, :, :t] = k[0]
            cache.v[li, slot, :, :t] = v[0]
            x = x + self._attend(layer, q, k, v, causal.unsqueeze(0))
            x = x + self._mlp(layer, x)
        return self._logits(weights, x)[0].cpu()

    @torch.inference_mode()
    def decode(
        self,
        weights: ModelWeights,
        cache: KVCache,
        slots: list[int],
        tokens: list[int],
        positions: list[int],
    ) -> torch.Tensor:
        """Advance each slot by one token at its own position; return logits `[B, vocab]`."""
        b = len(slots)
        dev = self.device
        slot_t = torch.tensor(slots, dtype=torch.long, device=dev)
        pos_t = torch.tensor(positions, dtype=torch.long, device=dev)
        x = weights.embed[torch.tensor(tokens, dtype=torch.long, device=dev)].unsqueeze(1)
        # Rows attend in buckets of similar length, each over its own longest context (as a
        # paged-attention engine costs the sum of the lengths): one long generation in the
        # batch would otherwise make every row gather and attend over its length.
        buckets = []
        for rows in length_buckets(positions):
            length = max(positions[r] for r in rows) + 1
            index = torch.tensor(rows, dtype=torch.long, device=dev)
            masked = torch.arange(length, device=dev).unsqueeze(0) > pos_t[index].unsqueeze(1)
            whole = len(rows) == b and slots == list(range(b))
            buckets.append((index, slot_t[index], length, masked.unsqueeze(1), whole))
        for li, layer in enumerate(weights.layers):
            q, k, v = self._qkv(layer, x, pos_t.unsqueeze(1))  # [B, heads, 1, d]
            cache.k[li][slot_t, :, pos_t] = k[:, :, 0]
            cache.v[li][slot_t, :, pos_t] = v[:, :, 0]
            attended = torch.empty_like(x) if len(buckets) > 1 else None
            for index, bucket_slots, length, mask, whole in buckets:
                if whole:  # every row, slots 0..B-1: views, no gather
                    keys = cache.k[li, :b, :, :length]
                    values = cache.v[li, :b, :, :length]
                else:
                    keys = cache.k[li, bucket_slots, :, :length]
                    values = cache.v[li, bucket_slots, :, :length]
                if attended is None:
                    x = x + self._attend(layer, q, keys, values, mask)
                else:
                    attended[index] = self._attend(layer, q[index], keys, values, mask)
            if attended is not None:
                x = x + attended
            x = x + self._mlp(layer, x)
        return self._logits(weights, x)[:, 0].cpu()

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(variance + self.shape.rms_norm_eps))

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos = self.cos[positions].unsqueeze(1)  # [B, 1, T, d]
        sin = self.sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _qkv(
        self, layer: LayerWeights, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        b, t, _ = x.shape
        h = self._norm(x, layer.input_norm)
        q = F.linear(h, layer.q, layer.q_bias).view(b, t, s.num_heads, s.head_dim).transpose(1, 2)
        k = F.linear(h, layer.k, layer.k_bias).view(b, t, s.num_kv_heads, s.head_dim)
        v = F.linear(h, layer.v, layer.v_bias).view(b, t, s.num_kv_heads, s.head_dim)
        return self._rope(q, positions), self._rope(k.transpose(1, 2), positions), v.transpose(1, 2)

    def _attend(
        self,
        layer: LayerWeights,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """q `[B, heads, Tq, d]`, keys/values `[B, kv_heads, L, d]`, mask `[B, Tq, L]` (True =
        hidden); returns the attention block's output `[B, Tq, H]`."""
        s = self.shape
        group = s.num_heads // s.num_kv_heads
        if group > 1:
            keys = keys.repeat_interleave(group, dim=1)
            values = values.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, keys.transpose(2, 3)) * s.head_dim**-0.5
        scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, values)  # [B, heads, Tq, d]
        b, _, tq, _ = out.shape
        return F.linear(out.transpose(1, 2).reshape(b, tq, s.num_heads * s.head_dim), layer.o)

    def _mlp(self, layer: LayerWeights, x: torch.Tensor) -> torch.Tensor:
        h = self._norm(x, layer.post_norm)
        return F.linear(F.silu(F.linear(h, layer.gate)) * F.linear(h, layer.up), layer.down)

    def _logits(self, weights: ModelWeights, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self._norm(x, weights.norm), weights.lm_head)


MIN_BUCKET = 32
"""Contexts up to this long attend together in one bucket."""
SPLIT_ABOVE = 4096
"""A batch splits into buckets only when attending padded would cover more row-positions
(rows x longest context) than this; below, each bucket's fixed cost outweighs what it saves
(`benchmarks/decode_buckets.py`)."""


def length_buckets(positions: list[int]) -> list[list[int]]:
    """The rows of a decode batch grouped by context length (`position + 1`): each bucket
    holds the rows whose length rounds up to the same power of two (at least `MIN_BUCKET`),
    so attending over each bucket's longest context costs at most twice the lengths' sum plus
    `MIN_BUCKET` per row. A small batch (`SPLIT_ABOVE`) stays whole. Rows keep their order
    within a bucket; buckets are in length order."""
    if len(positions) * (max(positions) + 1) <= SPLIT_ABOVE:
        return [list(range(len(positions)))]
    buckets: dict[int, list[int]] = {}
    for row, position in enumerate(positions):
        size = MIN_BUCKET
        while size < position + 1:
            size *= 2
        buckets.setdefault(size, []).append(row)
    return [buckets[size] for size in sorted(buckets)]


def full_logits(weights: ModelWeights, tokens: list[int]) -> torch.Tensor:
    """Logits `[T, vocab]` of a whole sequence (no persistent cache); used to check parity."""
    device = weights.embed.device
    decoder = Decoder(weights.shape, len(tokens), device)
    cache = KVCache(weights.shape, 1, len(tokens), device)
    return decoder.prefill(weights, cache, 0, tokens)
