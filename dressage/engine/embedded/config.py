"""`EngineConfig`: how one embedded engine is started (`dressage engine serve`'s flags)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dressage.engine.embedded.release_profiles import DEFAULT_RELEASE


@dataclasses.dataclass(frozen=True)
class LoraServing:
    """SGLang's LoRA server flags: `--max-lora-rank`, `--lora-target-modules`,
    `--max-loras-per-batch` (whose limit this engine does not enforce: it decodes each
    adapter's rows apart)."""

    max_lora_rank: int | None = None
    target_modules: tuple[str, ...] | None = None
    max_loras_per_batch: int = 8

    def refusal(self, rank: int, modules: set[str]) -> str | None:
        """Why an adapter of `rank` on `modules` does not fit (0.5.2 `LoRAManager`'s
        message), or None."""
        too_big = self.max_lora_rank is not None and rank > self.max_lora_rank
        foreign = self.target_modules is not None and not modules <= set(self.target_modules)
        if not too_big and not foreign:
            return None
        return (
            f"LoRA adapter with rank {rank} is incompatible with the current LoRA memory pool "
            "configuration. Please ensure that the LoRA adapter's rank is within the configured "
            "`--max-lora-rank` and that the target modules are included in "
            "`--lora-target-modules`."
        )


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
    lora: LoraServing | None = None
    """LoRA adapters served (`--enable-lora` and its flags); None: requests' `lora_path` is
    ignored and adapter loads are refused, as SGLang does without `--enable-lora`."""
    sglang_release: str = DEFAULT_RELEASE
    """The SGLang release whose HTTP API the engine serves
    (`dressage.engine.embedded.release_profiles`)."""
