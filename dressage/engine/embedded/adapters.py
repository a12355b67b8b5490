"""The LoRA adapters an embedded engine serves, by name, as SGLang's LoRA registry keeps them.

Owned by the scheduler thread (`Scheduler.adapters`): loads and unloads arrive as scheduler
commands, so an adapter appears or disappears between two steps. An unloaded name is refused
to new requests at once, and its weights are dropped only when no request in flight uses it
(SGLang 0.5.2 `LoRARegistry.unregister`, then `wait_for_unload`: "Waits until the usage counter
for a LoRA adapter reaches zero"): the unload's answer waits until then.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

from dressage.engine.embedded.model import ModelWeights


@dataclass
class AdapterSet:
    """Loaded adapters: each one's weight set (the base's tensors and its A and B) and the path
    it was loaded from."""

    weights: dict[str, ModelWeights] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    """`loaded_adapters` as SGLang answers it: `{lora_name: lora_path}`."""
    unloading: dict[str, list[Future[dict[str, str]]]] = field(default_factory=dict)
    """Names unregistered while requests still use them, with the answers that wait."""

    def serves(self, name: str) -> bool:
        """Whether a new request may name `name` (loaded and not being unloaded)."""
        return name in self.paths

    def load(self, name: str, path: str, weights: ModelWeights) -> dict[str, str]:
        if name in self.paths or name in self.unloading:
            raise ValueError(
                f"Failed to load LoRA adapter {name}: an adapter named {name} is already loaded"
            )
        self.weights[name] = weights
        self.paths[name] = path
        return dict(self.paths)

    def unload(self, name: str, in_use: Iterable[str | None]) -> Future[dict[str, str]]:
        """Unregister `name`; the future resolves (to the adapters left) once no request in
        flight uses it: at once when none does, else from `release`."""
        if name not in self.paths:
            raise ValueError(f"LoRA adapter {name} is not loaded")
        del self.paths[name]
        done: Future[dict[str, str]] = Future()
        self.unloading.setdefault(name, []).append(done)
        self.release(in_use)
        return done

    def release(self, in_use: Iterable[str | None]) -> None:
        """Drop the weights of every unregistered adapter that no request in `in_use` uses."""
        used = set(in_use)
        for name in [n for n in self.unloading if n not in used]:
            self.weights.pop(name, None)
            for done in self.unloading.pop(name):
                done.set_result(dict(self.paths))

    def weights_for(self, name: str | None, base: ModelWeights) -> ModelWeights:
        return base if name is None else self.weights[name]
