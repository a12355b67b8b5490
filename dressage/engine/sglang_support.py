"""Which SGLang releases the engine contract talks to, and what it sends each of them.

The facts live in one table, `dressage.api.sglang.FEATURES` (below every layer, so the job
model and the operator read the same one): each API feature Dressage uses that not every
supported release has, with the first release on the package index that has it, checked in
every release's source by `scripts/sglang_release_facts.py`. This module re-exports that table
for the client and the proxy and adds what only they need. `SGLANG_PINNED_VERSION` is the
release the engine image runs; `SGLANG_MIN_VERSION` is the oldest release the client talks to
at all.

The client (`EngineClient`) reads the engine's release from its server-info route (`version`)
and sends only what that release accepts; `require` turns a job that needs a feature the engine
lacks into one error at startup, naming the feature and the release it needs, instead of a
silent difference at run time (SGLang ignores unknown top-level request fields, and before the
pause modes every `/pause_generation` aborts all requests).

Routes that moved between releases are found by asking: the client and the proxy try the
newest name first and fall back to the older one on HTTP 404 (`WEIGHT_VERSION_ROUTES`,
`MODEL_INFO_ROUTES`, `SERVER_INFO_ROUTES`), remembering per engine which one answered, so no
release is asked for a deprecated alias (0.5.23 logs a warning on every `/get_model_info` and
`/get_server_info`) and none needs its number known first.

The embedded engine's release profiles derive from the same table; the contract never imports
the embedded engine.
"""

from __future__ import annotations

from dressage.api.sglang import (
    BEAM_WIDTH,
    DESTROY_WEIGHTS_UPDATE_GROUP,
    DETERMINISTIC_INFERENCE,
    FEATURES,
    FLATTENED_BUCKET,
    MODEL_INFO_ROUTE,
    NULL_DEFAULT_KEYS,
    NULL_REFUSING_KEYS,
    NULL_SAMPLING_DEFAULTS,
    PAUSE_MODES,
    ROUTED_EXPERTS,
    ROUTED_EXPERTS_START_LEN,
    SAMPLING_PARAM_KEYS,
    SAMPLING_SEED,
    SGLANG_MIN_VERSION,
    SGLANG_PINNED_VERSION,
    STOP_REGEX,
    UPDATE_FLUSH_CACHE,
    WATERMARK,
    WEIGHT_UPDATE_SESSIONS,
    WEIGHT_VERSION_SPANS,
    Feature,
    parse_version,
    sampling_keys_of,
    supports,
)

__all__ = [
    "BASE_SAMPLING_PARAM_KEYS",
    "BEAM_WIDTH",
    "DESTROY_WEIGHTS_UPDATE_GROUP",
    "DETERMINISTIC_INFERENCE",
    "FEATURES",
    "FLATTENED_BUCKET",
    "LATER_SAMPLING_PARAM_KEYS",
    "MODEL_INFO_ROUTE",
    "MODEL_INFO_ROUTES",
    "NULL_DEFAULT_KEYS",
    "NULL_REFUSING_KEYS",
    "NULL_SAMPLING_DEFAULTS",
    "PAUSE_MODES",
    "ROUTED_EXPERTS",
    "ROUTED_EXPERTS_START_LEN",
    "SAMPLING_SEED",
    "SERVER_INFO_ROUTES",
    "SGLANG_MIN_VERSION",
    "SGLANG_PINNED_VERSION",
    "STOP_REGEX",
    "UPDATE_FLUSH_CACHE",
    "WATERMARK",
    "WEIGHT_UPDATE_SESSIONS",
    "WEIGHT_VERSION_ROUTES",
    "WEIGHT_VERSION_SPANS",
    "Feature",
    "check_supported_release",
    "missing",
    "parse_version",
    "sampling_param_keys",
    "supports",
]

BASE_SAMPLING_PARAM_KEYS: tuple[str, ...] = tuple(
    key for key, feature in SAMPLING_PARAM_KEYS.items() if feature is None
)
"""The `sampling_params` keys of every supported release."""
LATER_SAMPLING_PARAM_KEYS: dict[str, Feature] = {
    key: feature for key, feature in SAMPLING_PARAM_KEYS.items() if feature is not None
}
"""The keys that arrived later, with the feature that brings each."""

WEIGHT_VERSION_ROUTES = ("/model_info", "/get_weight_version")
"""Where an engine reports its weight version, newest first: 0.5.23 `/model_info` (0.5.2 has
no such route), 0.5.2 `/get_weight_version` (gone in 0.5.23). Both are answered by the HTTP
process from the tokenizer manager's fields, with no scheduler round trip, so they keep
answering while generation is paused."""
MODEL_INFO_ROUTES = ("/model_info", "/get_model_info")
"""The model info, newest first (0.5.23 keeps `/get_model_info` as a deprecated alias that
logs a warning per call)."""
SERVER_INFO_ROUTES = ("/server_info", "/get_server_info")
"""The server's settings with `version` (its release), newest first (0.5.23 keeps
`/get_server_info` as a deprecated alias). Both ask the scheduler for its internal state, so
they are read once per engine, never as a probe."""


def sampling_param_keys(version: str) -> frozenset[str]:
    """The `sampling_params` keys SGLang release `version` takes."""
    return frozenset(sampling_keys_of(version))


def missing(version: str, features: list[Feature] | tuple[Feature, ...]) -> list[Feature]:
    """The features of `features` that release `version` lacks."""
    return [f for f in features if not supports(version, f)]


def check_supported_release(version: str) -> None:
    """ValueError when `version` is older than `SGLANG_MIN_VERSION`."""
    if parse_version(version) < parse_version(SGLANG_MIN_VERSION):
        raise ValueError(
            f"SGLang {version} is older than {SGLANG_MIN_VERSION}, the oldest release "
            "Dressage supports"
        )
