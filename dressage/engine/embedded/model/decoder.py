"""The embedded engine's incremental decoder: forward passes over a per-slot KV cache.

KV cache: one preallocated tensor per layer with a row ("slot") per running request. Prefill
writes a request's prompt into its slot; a decode step advances several slots by one token at
once, each at its own position, with attention masked beyond each row's length. That is what lets
the scheduler batch requests of different lengths without padding the prompts.

The math follows `transformers`' implementations of the served architectures in float32 (see
`shape`); unit tests check the logits, and for MoE models the chosen experts, against them.

Routed experts: when a forward pass is given a `routes` tensor `[tokens, num_layers, top_k]`
(int32), it records there the experts each input token was routed to in each sparse layer, the
way SGLang's `RoutedExpertsCapturer` does (dense layers keep whatever the tensor held; SGLang's
buffers hold zeros there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dressage.engine.embedded.model.moe import moe_forward, swiglu
from dressage.engine.embedded.model.shape import ModelShape
from dressage.engine.embedded.model.weights import LayerWeights, ModelWeights, project


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


def new_routes(shape: ModelShape, tokens: int) -> torch.Tensor:
    """A zeroed `routes` tensor for `tokens` input tokens of an MoE `shape`."""
    if shape.moe is None:
        raise ValueError(f"{shape.architecture} has no MoE layers: no experts to record")
    return torch.zeros((tokens, shape.num_layers, shape.moe.top_k), dtype=torch.int32)


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
        self,
        weights: ModelWeights,
        cache: KVCache,
        slot: int,
        tokens: list[int],
        routes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run `tokens` at positions 0..T-1 into `slot`; return logits `[T, vocab]` (and fill
        `routes` `[T, layers, top_k]` when given)."""
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
            x = x + self._mlp(li, layer, x, routes)
        return self._logits(weights, x)[0].cpu()

    @torch.inference_mode()
    def decode(
        self,
        weights: ModelWeights,
        cache: KVCache,
        slots: list[int],
        tokens: list[int],
        positions: list[int],
        routes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Advance each slot by one token at its own position; return logits `[B, vocab]` (and
        fill `routes` `[B, layers, top_k]`, one row per slot in order, when given)."""
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
            x = x + self._mlp(li, layer, x, routes)
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
        h = self._norm(x, layer["input_layernorm.weight"])
        q = project(h, layer, "self_attn.q_proj")
        k = project(h, layer, "self_attn.k_proj")
        v = project(h, layer, "self_attn.v_proj")
        q = q.view(b, t, s.num_heads, s.head_dim)
        k = k.view(b, t, s.num_kv_heads, s.head_dim)
        if s.qk_norm:
            q = self._norm(q, layer["self_attn.q_norm.weight"])
            k = self._norm(k, layer["self_attn.k_norm.weight"])
        v = v.view(b, t, s.num_kv_heads, s.head_dim).transpose(1, 2)
        return self._rope(q.transpose(1, 2), positions), self._rope(k.transpose(1, 2), positions), v

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
        flat = out.transpose(1, 2).reshape(b, tq, s.num_heads * s.head_dim)
        return project(flat, layer, "self_attn.o_proj")

    def _mlp(
        self, index: int, layer: LayerWeights, x: torch.Tensor, routes: torch.Tensor | None
    ) -> torch.Tensor:
        h = self._norm(x, layer["post_attention_layernorm.weight"])
        moe = self.shape.moe
        if moe is None or not self.shape.is_sparse(index):
            return swiglu(h, layer, "mlp.")
        out, experts = moe_forward(h, layer, moe)
        if routes is not None:
            routes[:, index] = experts.to(device="cpu", dtype=torch.int32)
        return out

    def _logits(self, weights: ModelWeights, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self._norm(x, weights.norm), weights.lm_head)


def full_logits(
    weights: ModelWeights, tokens: list[int], routes: torch.Tensor | None = None
) -> torch.Tensor:
    """Logits `[T, vocab]` of a whole sequence (no persistent cache); used to check parity.
    With `routes` (`new_routes(shape, T)`), the experts of every token are recorded there."""
    device = weights.embed.device
    decoder = Decoder(weights.shape, len(tokens), device)
    cache = KVCache(weights.shape, 1, len(tokens), device)
    return decoder.prefill(weights, cache, 0, tokens, routes)


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
