"""SGLang's HTTP API as Dressage's engine clients send and read it, whatever their transport.

Two clients call engines: `dressage.engine.client.EngineClient` (httpx; the trainer, the
publisher, the tests) and the proxy's generation path (`dressage.proxy.upstream`, pooled
keep-alive connections on its hot path). What an engine accepts and answers is the same for
both, so it lives here once (pure, no I/O but the route search's injected `get`):

- the route paths (`GENERATE`, ...; routes that moved between releases are
  `sglang_support.*_ROUTES`, found with `first_served`);
- what a `/generate` body becomes for one release (`body_for_release`) and which request field
  an engine's refusal names (`refused_field`);
- the error class of an answer's HTTP status (`status_error`): 503 busy or not ready, other
  4xx refused, other 5xx failed;
- the reading of the control answers: an engine's weight version (`weight_version_of`) and its
  release (`release_of`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from dressage.data.versions import normalize_version
from dressage.engine.errors import (
    EngineError,
    EngineRequestError,
    EngineServerError,
    EngineUnavailable,
)
from dressage.engine.protocol import error_message
from dressage.engine.sglang_support import (
    LATER_SAMPLING_PARAM_KEYS,
    NULL_REFUSING_KEYS,
    NULL_SAMPLING_DEFAULTS,
    ROUTED_EXPERTS,
    ROUTED_EXPERTS_START_LEN,
    SAMPLING_SEED,
    Feature,
    parse_version,
    supports,
)

CALL_TIMEOUT_S = 60.0
"""How long one control call to an engine (a weight load, a group call) waits when its caller
gives no bound: the engine client's default and the proxy's, for each engine it loads."""

# --- routes (the same name in every supported release)

GENERATE = "/generate"
HEALTH = "/health"
HEALTH_GENERATE = "/health_generate"
ABORT_REQUEST = "/abort_request"
PAUSE_GENERATION = "/pause_generation"
CONTINUE_GENERATION = "/continue_generation"
FLUSH_CACHE = "/flush_cache"
UPDATE_WEIGHTS_FROM_DISK = "/update_weights_from_disk"
INIT_WEIGHTS_UPDATE_GROUP = "/init_weights_update_group"
UPDATE_WEIGHTS_FROM_DISTRIBUTED = "/update_weights_from_distributed"
DESTROY_WEIGHTS_UPDATE_GROUP = "/destroy_weights_update_group"
BEGIN_WEIGHT_UPDATE = "/begin_weight_update"
END_WEIGHT_UPDATE = "/end_weight_update"


T = TypeVar("T")


async def first_served(
    routes: tuple[str, ...],
    get: Callable[[str], Awaitable[T]],
    is_absent: Callable[[T], bool],
    *,
    known: str | None = None,
    absent: Collection[str] = (),
) -> tuple[str, T]:
    """GET the route of `routes` (one that moved between releases, newest name first) the
    engine serves: `known` when it answered before, else each in turn (less those `absent`,
    answered 404 before) while `is_absent` holds for the answer (an HTTP 404). Returns the
    path asked last and its answer, that of the last candidate whatever it is."""
    if known is not None:
        return known, await get(known)
    candidates = [path for path in routes if path not in absent] or [routes[-1]]
    for path in candidates[:-1]:
        answer = await get(path)
        if not is_absent(answer):
            return path, answer
    return candidates[-1], await get(candidates[-1])


# --- requests


class UnsupportedField(ValueError):
    """A request field the engine's release does not have (`field`: where it is; `feature`:
    the release fact it needs)."""

    def __init__(self, message: str, field: str, feature: Feature) -> None:
        super().__init__(message)
        self.field = field
        self.feature = feature


def body_for_release(body: dict[str, Any], release: str, *, strict: bool = False) -> dict[str, Any]:
    """`/generate` `body` as SGLang release `release` takes it (pure; `body` when unchanged).

    - a `sampling_params` key the release lacks (`stop_regex` before 0.5.23, ...) is
      `UnsupportedField` naming it: the caller asked for a behaviour this engine cannot give;
      `sampling_seed` is left out instead (before 0.5.3: a TypeError, HTTP 500, there), as a
      seed only ever changes sampling on servers started with
      `--enable-deterministic-inference`, which such a release does not have;
    - a `null` that means the default is left out for a release that cannot take it (before
      0.5.23 a null temperature, top_p, top_k, ... is a TypeError), so it means the default
      there too; a later key's `null` is its default everywhere and left out likewise;
    - `return_routed_experts` is left out for a release without it (before 0.5.7; such a
      release ignores the field, the embedded engine playing it refuses it), and
      `routed_experts_start_len` is `UnsupportedField` there.

    `strict`: the seed and `return_routed_experts` are `UnsupportedField` too, for a caller
    that must not get an answer without what it asked for.
    """
    routed = bool(body.get("return_routed_experts"))
    if routed and not supports(release, ROUTED_EXPERTS):
        if strict:
            _refuse("return_routed_experts", ROUTED_EXPERTS, release)
        body = {k: v for k, v in body.items() if k != "return_routed_experts"}
    if "routed_experts_start_len" in body and not supports(release, ROUTED_EXPERTS_START_LEN):
        _refuse("routed_experts_start_len", ROUTED_EXPERTS_START_LEN, release)
    params: dict[str, Any] = body["sampling_params"]
    drop = []
    for key, value in params.items():
        feature = LATER_SAMPLING_PARAM_KEYS.get(key)
        if feature is not None and (value is None or not supports(release, feature)):
            if value is not None and (strict or feature is not SAMPLING_SEED):
                _refuse(f"sampling_params.{key}", feature, release)
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


def _refuse(field: str, feature: Feature, release: str) -> None:
    name = field.rsplit(".", 1)[-1]
    raise UnsupportedField(
        f"{field}: the engine runs SGLang {release}, which has no {name} ({feature.what}; "
        f"SGLang >= {feature.since})",
        field,
        feature,
    )


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


# --- answers


def status_error(status: int, body: bytes, *, url: str, reason: str = "") -> EngineError | None:
    """The error an answer with HTTP `status` is, None below 400. 503 is `EngineUnavailable`:
    SGLang turns a request away with it when its queue is full (v0.5.2 `scheduler.py`, "The
    request queue is full.") or while not ready, so the engine never took it; another 4xx is
    `EngineRequestError` (the same request fails the same way), another 5xx
    `EngineServerError`. The message is the body's error text (`protocol.error_message`, any
    of SGLang's shapes; the first 2,000 bytes), else `reason`."""
    if status < 400:
        return None
    message = reason if reason and not body else error_message(body[:2000])
    if status == 503:
        return EngineUnavailable(message, url=url, status_code=status)
    if status < 500:
        return EngineRequestError(message, url=url, status_code=status)
    return EngineServerError(message, url=url, status_code=status)


def weight_version_of(answer: object) -> str | None:
    """The weight version in a weight-version route's answer (`sglang_support.
    WEIGHT_VERSION_ROUTES`: `{"weight_version": ...}`), None when it reports none."""
    return normalize_version(answer.get("weight_version")) if isinstance(answer, dict) else None


def release_of(info: object) -> str:
    """The SGLang release in a server-info answer (`version`); ValueError saying why when it
    reports none or one that is not a release number. (Whether it is supported is
    `sglang_support.check_supported_release`.)"""
    version = info.get("version") if isinstance(info, dict) else None
    if not isinstance(version, str):
        raise ValueError("the server info reports no SGLang release (`version`)")
    parse_version(version)
    return version
