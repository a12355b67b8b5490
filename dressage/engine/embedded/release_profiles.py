"""Release profiles: how the embedded engine behaves when it plays a given SGLang release.

`dressage engine serve --sglang-release R` serves SGLang release R's HTTP API, as far as
Dressage uses it: its routes (and the deprecated aliases that log a warning on every call),
its weight-update protocol, its validation answers, its abort shapes and `meta_info` keys, how
it reports its weight version and release. One `ReleaseProfile` per release of the tested
matrix (`dressage.api.sglang.SGLANG_TESTED_RELEASES`); the newest is the default, as on a
cluster that installs SGLang today. The contract tier (`tests/contract/`) checks each profile
against that release's own code, so a profile cannot drift from its release without a red test.

What the table of release facts (`dressage.api.sglang.FEATURES`, first releases checked in
every release's source) says a release has is read from it, not restated here: the sampling
keys, which nulls it refuses, the pause modes, weight-update sessions, flattened buckets and
weight-version spans. Each other value below was read in that release's wheel (the package
tree is the tag's `python/sglang/`), in `srt/entrypoints/http_server.py` (routes, handlers),
`srt/entrypoints/api_contract.py` with `api/v1/api_types.py` (0.5.23's `/generate` schema gate),
`srt/managers/io_struct.py` (request classes), `srt/managers/tokenizer_manager.py`
(`_handle_batch_output`, `_handle_abort_req`, `pause_generation`, the model-update lock),
`srt/managers/scheduler*.py` (`abort_request`, `flush_cache`, the weight-update session) and
`srt/sampling/sampling_params.py`. The field docstrings quote where.

This module is pure data: no torch, no I/O (the proxy imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dressage.api.sglang import (
    FLATTENED_BUCKET,
    NULL_REFUSING_KEYS,
    NULL_SAMPLING_DEFAULTS,
    PAUSE_MODES,
    SGLANG_NEWEST_TESTED,
    SGLANG_TESTED_RELEASES,
    WEIGHT_UPDATE_SESSIONS,
    WEIGHT_VERSION_SPANS,
    sampling_keys_of,
    supports,
)
from dressage.api.sglang import stand_in_release as api_stand_in_release

GET, POST, PUT = "GET", "POST", "PUT"

Validation = Literal["dataclass", "schema-gate"]


@dataclass(frozen=True)
class AbortShapes:
    """What a generation aborted by `/abort_request`, a pause or `abort_all_requests` returns."""

    running_finish: dict[str, object]
    """`finish_reason` of a request that had started (prefill done): `FINISH_ABORT()`'s
    `to_json()` (`managers/schedule_batch.py`), sent through the normal output path with
    every `meta_info` key and the tokens so far."""
    queued_message: str
    """`finish_reason.message` of a request still in the waiting queue."""
    queued_has_output: bool
    """Whether the queued abort's answer has `output_ids` ([]), `weight_version`,
    `weight_versions` and `e2e_latency` (0.5.23) or only `text`, `prompt_tokens: 0` and
    `completion_tokens: 0` (0.5.2)."""


@dataclass(frozen=True)
class ReleaseProfile:
    """One SGLang release as the embedded engine plays it (see the module docstring)."""

    release: str
    routes: frozenset[tuple[str, str]]
    """`(method, path)` the embedded engine serves under this profile: each one a route of
    the release, and every route Dressage or an operator probe calls on it."""
    deprecated: dict[str, str] = field(default_factory=dict)
    """Alias -> route it forwards to; the release logs a deprecation warning on every call
    (0.5.23 `get_model_info`, `get_server_info`: "Endpoint '...' is deprecated ...")."""
    not_served: tuple[str, ...] = ()
    """Routes of the release the embedded engine does not serve, because Dressage does not
    use them (e.g. 0.5.23 `/update_weights_from_tensor`, `/release_memory_occupation`)."""
    weight_version_route: str = "/get_weight_version"
    """Where the release reports the served weight version, answered by the HTTP process
    without the scheduler (so also while generation is paused)."""
    model_info_route: str = "/get_model_info"
    server_info_route: str = "/get_server_info"
    """Reports `version` (the release) among the server's settings; asks the scheduler for its
    internal state (`get_internal_state`), so it is no probe."""
    schema_only_keys: frozenset[str] = frozenset()
    """Keys the schema gate admits but the release's `SamplingParams` does not take: a
    `TypeError`, HTTP 500 (0.5.23 `choice`, which only its Rust server reads)."""
    lax_type_keys: frozenset[str] = frozenset()
    """Keys whose value of the wrong type the release takes without a look (0.5.2
    `max_new_tokens: 2.5`, `ignore_eos: "yes"`, `stop_token_ids: ["2"]`). The embedded engine
    does not guess what such a value means: it answers the 500 the release gives the type
    errors it does catch."""
    validation: Validation = "dataclass"
    """How `/generate` judges `sampling_params`. `dataclass` (0.5.2): `SamplingParams(**p)` in
    the tokenizer manager; an unknown key or a value of the wrong type raises `TypeError`, which
    the handler does not catch: HTTP 500 `Internal Server Error` (plain text); `verify`'s
    `ValueError` is HTTP 400 `{"error": {"message"}}`. `schema-gate` (0.5.23): the body is
    decoded against the API schema first (`api_contract.generate_contract_error`): an unknown
    key or a wrong type is HTTP 400 `{"error": "<serde-style text>"}`; range errors stay
    `verify`'s 400 `{"error": {"message"}}`; `null` means the default."""
    flush_refused_while_running: bool = False
    """A weight update's cache flush fails while requests run (0.5.23
    `flush_cache_after_weight_update`: HTTP 400 "Weights were updated, but the cache was not
    flushed because requests are still running or queued. ...", and the tokenizer manager
    keeps the old version label since the call failed). 0.5.2 asserts the flush instead: its
    updates always wait for in-flight requests."""
    flush_takes_timeout: bool = False
    """`/flush_cache?timeout=S` waits up to S seconds for the engine to be idle (0.5.23)."""
    flush_failure_text: str | None = None
    """`/flush_cache`'s 400 text when requests run (None: the success text, as 0.5.2 sends it
    with the 400; 0.5.23 "Flush cache failed.\n")."""
    update_skips_lock_when_paused: bool = False
    """Weight updates wait for in-flight generations (`model_update_lock.writer_lock`, both
    releases) unless generation is paused (0.5.23 `update_weights_from_disk`: "Immediately
    update the weights if the engine is in paused state")."""
    health_generates: bool = True
    """`/health` runs a one-token generation like `/health_generate` (0.5.2: one handler);
    0.5.23 answers `/health` at once unless `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`."""
    ready_while_paused: bool = True
    """Only with a `/ready` route: 0.5.23 `is_ready()` is `not is_pause and is_healthy()`."""
    aborts: AbortShapes = field(
        default_factory=lambda: AbortShapes(
            running_finish={
                "type": "abort",
                "message": "Aborted",
                "status_code": None,
                "err_type": None,
            },
            queued_message="Abort before prefill",
            queued_has_output=False,
        )
    )
    meta_info_keys: tuple[str, ...] = (
        "id",
        "finish_reason",
        "prompt_tokens",
        "weight_version",
        "completion_tokens",
        "cached_tokens",
        "e2e_latency",
    )
    """The `meta_info` keys of a finished answer (plus `output_token_logprobs` when asked)."""
    stream_output_ids: Literal["incremental", "cumulative"] = "incremental"
    """What a stream chunk's `output_ids` holds: the tokens since the last chunk (0.5.2
    `_handle_batch_output`: `state.output_ids[state.last_output_offset:]`) or all so far
    (0.5.23 without `--incremental-streaming-output`). `text`, `output_token_logprobs` and
    `completion_tokens` are cumulative in both."""

    @property
    def sampling_param_keys(self) -> tuple[str, ...]:
        """The keys the release's `/generate` admits: those its `SamplingParams` takes, then
        the schema-only ones (in the schema's order where the release has a schema gate)."""
        return sampling_keys_of(self.release) + tuple(sorted(self.schema_only_keys))

    @property
    def null_refusing_keys(self) -> frozenset[str]:
        """Keys whose `null` the release cannot take (0.5.2 compares them: TypeError, HTTP
        500); from `NULL_SAMPLING_DEFAULTS` on a null is the default."""
        if supports(self.release, NULL_SAMPLING_DEFAULTS):
            return frozenset()
        return NULL_REFUSING_KEYS

    @property
    def weight_update_sessions(self) -> bool:
        """`/update_weights_from_distributed` is refused outside `/begin_weight_update` ...
        `/end_weight_update` (0.5.23 `SchedulerWeightUpdaterManager`: "update_weights_from_
        distributed must run between begin_weight_update() and end_weight_update()")."""
        return supports(self.release, WEIGHT_UPDATE_SESSIONS)

    @property
    def flattened_bucket(self) -> bool:
        """`load_format: "flattened_bucket"`: the bucket arrives as one uint8 broadcast, tensor
        `i` at the byte offset after tensors `0..i-1` (0.5.23 `weight_sync/tensor_bucket.py`
        `FlattenedTensorBucket.empty`, which refuses an offset not aligned to the dtype)."""
        return supports(self.release, FLATTENED_BUCKET)

    @property
    def pause_modes(self) -> bool:
        """`/pause_generation` reads `{mode}` (0.5.23); 0.5.2 reads no body and aborts all."""
        return supports(self.release, PAUSE_MODES)

    @property
    def weight_version_spans(self) -> bool:
        """`meta_info.weight_versions`: per-token version spans `{version, start, end}`."""
        return supports(self.release, WEIGHT_VERSION_SPANS)

    def serves(self, method: str, path: str) -> bool:
        return (method, path) in self.routes

    def paths(self) -> frozenset[str]:
        return frozenset(path for _, path in self.routes)


def _routes(*entries: tuple[str, tuple[str, ...]]) -> frozenset[tuple[str, str]]:
    return frozenset((method, path) for path, methods in entries for method in methods)


PROFILE_0_5_2 = ReleaseProfile(
    release="0.5.2",
    routes=_routes(
        ("/generate", (POST, PUT)),
        ("/update_weights_from_disk", (POST,)),
        ("/init_weights_update_group", (POST,)),
        ("/update_weights_from_distributed", (POST,)),
        ("/flush_cache", (GET, POST)),
        ("/pause_generation", (POST,)),
        ("/continue_generation", (POST,)),
        ("/abort_request", (POST,)),
        ("/get_weight_version", (GET,)),
        ("/load_lora_adapter", (POST,)),
        ("/unload_lora_adapter", (POST,)),
        ("/get_model_info", (GET,)),
        ("/get_server_info", (GET,)),
        ("/health", (GET,)),
        ("/health_generate", (GET,)),
    ),
    not_served=(
        "/update_weights_from_tensor",
        "/update_weight_version",
        "/get_weights_by_name",
        "/release_memory_occupation",
        "/resume_memory_occupation",
        "/get_load",
    ),
    lax_type_keys=frozenset(
        {
            "max_new_tokens",
            "stop_token_ids",
            "n",
            "ignore_eos",
            "skip_special_tokens",
            "spaces_between_special_tokens",
            "no_stop_trim",
        }
    ),
)
"""SGLang 0.5.2 (September 2025), the oldest release Dressage supports."""

PROFILE_0_5_23 = ReleaseProfile(
    release="0.5.23",
    routes=_routes(
        ("/generate", (POST, PUT)),
        ("/update_weights_from_disk", (POST,)),
        ("/init_weights_update_group", (POST,)),
        ("/destroy_weights_update_group", (POST,)),
        ("/begin_weight_update", (POST,)),
        ("/update_weights_from_distributed", (POST,)),
        ("/end_weight_update", (POST,)),
        ("/flush_cache", (GET, POST)),
        ("/pause_generation", (POST,)),
        ("/continue_generation", (POST,)),
        ("/abort_request", (POST,)),
        ("/load_lora_adapter", (POST,)),
        ("/unload_lora_adapter", (POST,)),
        ("/model_info", (GET,)),
        ("/get_model_info", (GET,)),
        ("/server_info", (GET,)),
        ("/get_server_info", (GET,)),
        ("/health", (GET,)),
        ("/health_generate", (GET,)),
        ("/ready", (GET,)),
    ),
    deprecated={"/get_model_info": "/model_info", "/get_server_info": "/server_info"},
    not_served=(
        "/update_weights_from_tensor",
        "/update_weights_from_ipc",
        "/update_weight_version",
        "/get_weights_by_name",
        "/release_memory_occupation",
        "/resume_memory_occupation",
        "/load_lora_adapter_from_tensors",
        "/weights_checker",
        "/remote_instance_transfer_engine_info",
    ),
    weight_version_route="/model_info",
    model_info_route="/model_info",
    server_info_route="/server_info",
    schema_only_keys=frozenset({"choice"}),
    validation="schema-gate",
    flush_refused_while_running=True,
    flush_takes_timeout=True,
    flush_failure_text="Flush cache failed.\n",
    update_skips_lock_when_paused=True,
    health_generates=False,
    ready_while_paused=False,
    aborts=AbortShapes(
        running_finish={
            "type": "abort",
            "message": "Aborted",
            "status_code": None,
            "err_type": None,
        },
        queued_message="Abort in waiting queue",
        queued_has_output=True,
    ),
    meta_info_keys=(
        "id",
        "finish_reason",
        "prompt_tokens",
        "weight_version",
        "num_retractions",
        "reasoning_tokens",
        "completion_tokens",
        "cached_tokens",
        "weight_versions",
        "e2e_latency",
    ),
    stream_output_ids="cumulative",
)
"""SGLang 0.5.23 (October 2026), the newest release on the package index when the matrix last
moved."""

PROFILES: dict[str, ReleaseProfile] = {p.release: p for p in (PROFILE_0_5_2, PROFILE_0_5_23)}
"""Every profile by release; exactly the tested matrix (a unit test keeps them equal)."""

DEFAULT_RELEASE = SGLANG_NEWEST_TESTED
"""The release the embedded engine plays unless told otherwise."""

HEALTH_CHECK_TIMEOUT_S = 20.0
"""`SGLANG_HEALTH_CHECK_TIMEOUT`'s default in both releases (`http_server.py`): how long a
health generation may wait for the scheduler before it answers 503."""

FLUSH_REFUSED_MESSAGE = (
    "Weights were updated, but the cache was not flushed because requests are still running or "
    "queued. Retract or finish them, then call /flush_cache."
)
"""0.5.23 `SchedulerWeightUpdaterManager.flush_cache_after_weight_update`."""

SESSION_REQUIRED_MESSAGE = (
    "update_weights_from_distributed must run between begin_weight_update() and end_weight_update()"
)
SESSION_OPEN_MESSAGE = "a weight-update session is already open; call end_weight_update() first"
SESSION_NOT_OPEN_MESSAGE = "no weight-update session is open; call begin_weight_update() first"
"""0.5.23 `SchedulerWeightUpdaterManager.begin_weight_update` / `end_weight_update`."""


def deprecation_warning(alias: str, route: str) -> str:
    """The warning 0.5.23 logs on every call of a deprecated alias (`get_model_info`)."""
    return (
        f"Endpoint '{alias}' is deprecated and will be removed in a future version. "
        f"Please use '{route}' instead."
    )


def stand_in_release(version: str) -> str:
    """The tested release whose profile plays SGLang `version`: itself when tested, else the
    newest tested release not newer than it (the oldest tested one for an older release)."""
    return version if version in PROFILES else api_stand_in_release(version)


def profile_for(release: str) -> ReleaseProfile:
    """The profile of `release`; ValueError naming the tested releases otherwise."""
    profile = PROFILES.get(release)
    if profile is None:
        raise ValueError(
            f"no embedded-engine profile for SGLang {release}: the embedded engine plays "
            f"the tested releases {', '.join(SGLANG_TESTED_RELEASES)}"
        )
    return profile
