"""What a `/generate` body becomes for one SGLang release, and which field an engine's refusal
names (pure): the proxy sends each engine only what its release accepts."""

from __future__ import annotations

import re
from typing import Any

from dressage.engine.sglang_support import (
    LATER_SAMPLING_PARAM_KEYS,
    NULL_REFUSING_KEYS,
    NULL_SAMPLING_DEFAULTS,
    ROUTED_EXPERTS,
    SAMPLING_SEED,
    supports,
)
from dressage.proxy.errors import invalid

_UNKNOWN_FIELD = re.compile(r"^unknown field `(\w+)`")
_FIELD_PREFIX = re.compile(r"^((?:sampling_params\.)?\w+(?:\[\d+\])?):")


def refused_field(message: str) -> str | None:
    """The request field an engine's refusal names, when it names one: 0.5.23's schema gate
    (`unknown field `stop_regex`, ...`: a `sampling_params` key, the only map it refuses
    unknown keys of) or the embedded engine's `field: problem`."""
    unknown = _UNKNOWN_FIELD.match(message)
    if unknown is not None:
        return f"sampling_params.{unknown.group(1)}"
    prefix = _FIELD_PREFIX.match(message)
    return prefix.group(1) if prefix is not None else None


def body_for_release(body: dict[str, Any], release: str) -> dict[str, Any]:
    """`body` as SGLang release `release` takes it (pure).

    - `sampling_seed` is left out for a release without it (before 0.5.3: a TypeError, HTTP
      500, there): a seed only ever changes sampling on servers started with
      `--enable-deterministic-inference`, which such a release does not have;
    - any other `sampling_params` key the release lacks (`stop_regex` before 0.5.23, ...) is
      refused with 400 naming it: the agent asked for a behaviour this engine cannot give;
    - a `null` that means the default is left out for a release that cannot take it (before
      0.5.23 a null temperature, top_p, top_k, ... is a TypeError), so it means the default
      there too; a later key's `null` is its default everywhere and left out likewise;
    - `return_routed_experts` is left out for a release without it (before 0.5.7; such a release
      ignores the field, the embedded engine playing it refuses it): the turn is recorded
      without routes, and the trainer routes those tokens with its own router.
    """
    if body.get("return_routed_experts") and not supports(release, ROUTED_EXPERTS):
        body = {k: v for k, v in body.items() if k != "return_routed_experts"}
    params: dict[str, Any] = body["sampling_params"]
    drop = []
    for key, value in params.items():
        feature = LATER_SAMPLING_PARAM_KEYS.get(key)
        if feature is not None and (value is None or not supports(release, feature)):
            if value is not None and feature is not SAMPLING_SEED:
                raise invalid(
                    f"sampling_params.{key}: the engine runs SGLang {release}, which has no "
                    f"{key} ({feature.what}; SGLang >= {feature.since})",
                    f"sampling_params.{key}",
                )
            drop.append(key)
        elif (
            value is None
            and key in NULL_REFUSING_KEYS
            and not supports(release, NULL_SAMPLING_DEFAULTS)
        ):
            drop.append(key)
    if not drop:
        return body
    return {**body, "sampling_params": {k: v for k, v in params.items() if k not in drop}}
