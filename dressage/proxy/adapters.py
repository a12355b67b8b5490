"""LoRA jobs behind the proxy: a weight version after the base is an adapter that every engine
has loaded under the version's label (`dressage.weights.lora`), and a turn names it.

With `ProxyConfig.lora_base_version` set, each piece of a turn is sent with SGLang's
`lora_path` naming the job's current version (the pool's target version), unless that version
is the base itself; SGLang looks the name up in its LoRA registry and the request keeps that
adapter for its whole life (0.5.2 `TokenizerManager._tokenize_one_request`:
`obj.lora_id = await self.lora_registry.acquire(obj.lora_path)`, released when it finishes).
The engine itself reports the base's version for every token (its `weight_version` does not
change when an adapter loads), so the piece's tokens are stamped with the adapter it named:
exact by construction, whatever happens to the engine's adapters meanwhile. A piece resumed
after a pause is sent again with the version current then, as full weights would be.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dressage.data.spans import VersionSpan

if TYPE_CHECKING:
    from dressage.proxy.pieces import Piece

LORA_PATH = "lora_path"
"""SGLang's `GenerateReqInput.lora_path` (an adapter's name, 0.5.2 and 0.5.23)."""


def name_adapter(body: dict[str, Any], target: str | None, base: str | None) -> str | None:
    """Put the adapter of version `target` in `body` (a LoRA job: `base` set, and `target`
    not the base version); returns the adapter named, or None."""
    if base is None or target is None or target == base:
        return None
    body[LORA_PATH] = target
    return target


def stamped(piece: Piece, adapter: str | None) -> Piece:
    """`piece` with every token's version the adapter it ran with (unchanged without one)."""
    if adapter is None:
        return piece
    n = len(piece.output_ids)
    return dataclasses.replace(
        piece,
        versions=[adapter] * n,
        runs=[VersionSpan(adapter, n)] if n else [],
        weight_version=adapter,
    )
