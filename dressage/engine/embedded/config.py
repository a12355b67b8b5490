"""`EngineConfig`: how one embedded engine is started (`dressage engine serve`'s flags)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dressage.engine.embedded.release_profiles import DEFAULT_RELEASE


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    model_source: str
    """What the user passed (`builtin:tiny` or a path); reported by the model-info route."""
    model_path: Path
    """The checkpoint directory it resolved to."""
    cache_dir: Path | None = None
    seed: int = 0
    weight_version: str = "default"
    max_batch_size: int = 32
    context_length: int | None = None
    start_unloaded: bool = False
    """Serve without weights until the first /update_weights_from_disk."""
    min_step_interval_ms: float = 0.0
    """Never start two scheduler steps less than this apart (0: as fast as the CPU allows)."""
    weights_group_timeout_s: float = 600.0
    """Bound on joining a weight-update group and on each of its broadcasts."""
    max_queued_requests: int | None = None
    """Most requests waiting for a free slot (beyond the `max_batch_size` running ones); one
    more is turned away with SGLang's HTTP 503 "The request queue is full." (None: no limit,
    SGLang's default)."""
    device: str = "cpu"
    """Torch device of the weights, the KV cache and the forward passes (`cpu`, `cuda`,
    `cuda:N`); sampling stays on the CPU either way."""
    sglang_release: str = DEFAULT_RELEASE
    """The SGLang release whose HTTP API the engine serves
    (`dressage.engine.embedded.release_profiles`)."""
