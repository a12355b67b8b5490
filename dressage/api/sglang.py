"""The SGLang releases a job may name (`spec.inference.sglangVersion`), torch- and I/O-free.

The supported range is the tested range. `SGLANG_TESTED_RELEASES` is the release matrix: the
contract tier (`tests/contract/`) runs once against each of them (`scripts/test.sh`), and
moving the matrix is `bash scripts/sglang-compat.sh VERSION` plus the fixes it shows. A job
may name any release from the oldest tested to the newest tested; an older one is refused, and
a newer one is accepted as untested: the operator marks the job `SGLangReleaseUntested` and
posts a Warning Event, `dressage run` prints one warning. The newest tested release is the
default and the release of the engine image (`images/sglang/Dockerfile`).

What each release has is one table here, `FEATURES`: every API feature Dressage uses that
not every supported release has, with the first release on the package index that has it and
the source evidence that decides it (a request field, a sampling key, a route, a server
argument, a function). `scripts/sglang_release_facts.py` reads that evidence in the wheel of
every release from the oldest to the newest tested, without importing SGLang, and the table's
`since` values are held to its committed output (`scripts/sglang_release_facts.json`) by a unit
test. The sampling keys (`SAMPLING_PARAM_KEYS`) and the null handling of each release derive
from the same table. The job model and the operator read it here, below every other layer;
the engine contract (`dressage.engine.sglang_support`) adds the client's route fallbacks, and
the embedded engine's release profiles derive their per-release switches from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SGLANG_TESTED_RELEASES: tuple[str, ...] = ("0.5.2", "0.5.23")
"""The releases the contract tier runs against, oldest first: the oldest release Dressage
supports and the newest on the package index when the matrix last moved. Each has its
environment list in `tests/contract/releases/<release>.txt`."""
SGLANG_OLDEST_TESTED = SGLANG_TESTED_RELEASES[0]
SGLANG_NEWEST_TESTED = SGLANG_TESTED_RELEASES[-1]
SGLANG_TESTED_RANGE = f"{SGLANG_OLDEST_TESTED} to {SGLANG_NEWEST_TESTED}"
"""The tested range in words (`0.5.2 to 0.5.23`), as messages name it."""

SGLANG_DEFAULT_VERSION = SGLANG_NEWEST_TESTED
"""`spec.inference.sglangVersion`'s default: the release of the engine image and of the
chart's default engine image tag."""
SGLANG_PINNED_VERSION = SGLANG_DEFAULT_VERSION
"""The release in the engine image (the same as `SGLANG_DEFAULT_VERSION`)."""
SGLANG_MIN_VERSION = SGLANG_OLDEST_TESTED
"""The oldest release Dressage supports."""


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_POST = re.compile(r"^v?\d+\.\d+\.\d+\.?post(\d+)")


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.5.3.post1` or `v0.5.3` -> `(0, 5, 3)`; ValueError naming the text otherwise."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise ValueError(f"not an SGLang release version: {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def release_order(text: str) -> tuple[int, int, int, int]:
    """`0.5.15.post1` -> `(0, 5, 15, 1)`, `0.5.15` -> `(0, 5, 15, 0)`: a post release sorts
    after its base, so a feature that arrived in one is not claimed for the base."""
    post = _POST.match(text.strip())
    return (*parse_version(text), int(post.group(1)) if post else 0)


def at_least(version: str, since: str) -> bool:
    """Whether release `version` is `since` or later."""
    return release_order(version) >= release_order(since)


def check_release_in_range(version: str) -> None:
    """ValueError when `version` is not a release a job may name: not a version, or older than
    the oldest tested release. Releases newer than the newest tested are accepted
    (`is_untested_newer` says so)."""
    if parse_version(version) < parse_version(SGLANG_OLDEST_TESTED):
        raise ValueError(
            f"SGLang {version} is older than the tested releases ({SGLANG_TESTED_RANGE}); "
            f"name {SGLANG_OLDEST_TESTED} or later"
        )


def stand_in_release(version: str) -> str:
    """The tested release whose HTTP API the embedded engine serves when a job names SGLang
    `version`: itself when tested, else the newest tested release not newer than it (the oldest
    tested one for an older release)."""
    if version in SGLANG_TESTED_RELEASES:
        return version
    wanted = parse_version(version)
    older = [r for r in SGLANG_TESTED_RELEASES if parse_version(r) <= wanted]
    return older[-1] if older else SGLANG_TESTED_RELEASES[0]


def has_routed_experts(version: str) -> bool:
    """Whether SGLang release `version` can return the routed experts of a generation."""
    return supports(version, ROUTED_EXPERTS)


def is_untested_newer(version: str) -> bool:
    """Whether `version` is newer than the newest tested release (accepted, untested)."""
    return parse_version(version) > parse_version(SGLANG_NEWEST_TESTED)


def untested_release_message(version: str) -> str | None:
    """The warning for a job naming `version`, or None when the release is in the tested
    range."""
    if not is_untested_newer(version):
        return None
    return (
        f"SGLang {version} is newer than the tested releases ({SGLANG_TESTED_RANGE}): the engine "
        "command line, probes and request shapes are those of "
        f"{SGLANG_NEWEST_TESTED}; check the release with `bash scripts/sglang-compat.sh "
        f"{version}` before relying on it"
    )


def has_access_log_exclusion(version: str) -> bool:
    """Whether SGLang release `version` has `--uvicorn-access-log-exclude-prefixes`."""
    return supports(version, ACCESS_LOG_EXCLUDE)


def has_deterministic_inference(version: str) -> bool:
    """Whether SGLang release `version` has `--enable-deterministic-inference`."""
    return supports(version, DETERMINISTIC_INFERENCE)


# --- What each release has: one table, checked against every release's source


@dataclass(frozen=True)
class RequestField:
    """A field of a request class in `srt/managers/io_struct.py` (or of its base there)."""

    request: str
    field: str


@dataclass(frozen=True)
class SamplingParam:
    """A key `SamplingParams` (`srt/sampling/sampling_params.py`) takes."""

    key: str


@dataclass(frozen=True)
class NullDefault:
    """`SamplingParams` reads a `null` for `key` as the key's default: its `__init__` or
    `__post_init__` compares the key with None (`self.top_p if self.top_p is not None else
    1.0`)."""

    key: str


@dataclass(frozen=True)
class Route:
    """A route the HTTP server registers (`srt/entrypoints/http_server.py`)."""

    path: str


@dataclass(frozen=True)
class ServerArg:
    """A field of the server's arguments (`srt/server_args.py`, or `srt/arg_groups/` where a
    release keeps them there); its flag is the name with dashes."""

    name: str


@dataclass(frozen=True)
class Function:
    """A function or method defined anywhere in the release's package."""

    name: str


@dataclass(frozen=True)
class MetricLabel:
    """A label on SGLang's own Prometheus metrics (data parallelism, priority scheduling and
    extra labels off, as the operator starts SGLang). `collector` says which series carry it:
    `scheduler` (the dict literal of the scheduler's labels: the one keyed `model_name`,
    `engine_type`, `tp_rank`), `tokenizer` (the tokenizer manager's: the dict keyed
    `model_name` from `served_model_name`, in `managers/tokenizer_manager.py` or, by 0.5.23,
    `observability/metrics_collector.py`) or `per_request` (a label name in
    `TokenizerMetricsCollector`'s per-request series)."""

    collector: str
    label: str


Evidence = RequestField | SamplingParam | NullDefault | Route | ServerArg | Function | MetricLabel


@dataclass(frozen=True)
class Feature:
    """An SGLang API feature Dressage uses that not every supported release has."""

    name: str
    since: str
    """The first release on the package index that has it: what `scripts/
    sglang_release_facts.py` found by reading every release's source for `evidence`
    (committed in `scripts/sglang_release_facts.json`; a unit test keeps the two equal)."""
    what: str
    evidence: tuple[Evidence, ...]
    """What shows the feature in a release's source; all of it must be there."""


NULL_REFUSING_KEYS: frozenset[str] = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_new_tokens",
    }
)
"""The keys whose `null` a release without `NULL_SAMPLING_DEFAULTS` cannot take (0.5.2's
`SamplingParams` compares them: TypeError, HTTP 500). Such a release is sent such a key's
null as no key at all, which means the default there too."""

SAMPLING_SEED = Feature(
    "sampling_seed",
    "0.5.3",
    "sampling_params.sampling_seed (per-request seed; the sampler uses it only when the server "
    "runs with --enable-deterministic-inference); 0.5.3 to 0.5.9 refuse an explicit null",
    (SamplingParam("sampling_seed"),),
)
DETERMINISTIC_INFERENCE = Feature(
    "deterministic_inference",
    "0.5.3",
    "--enable-deterministic-inference, the mode in which the sampler draws from "
    "sampling_params.sampling_seed (layers/sampler.py); an older parser refuses the flag",
    (ServerArg("enable_deterministic_inference"),),
)
DESTROY_WEIGHTS_UPDATE_GROUP = Feature(
    "destroy_weights_update_group",
    "0.5.3",
    "/destroy_weights_update_group {group_name}: leave a weight-update group (before it an "
    "engine stays in the group until it exits; a new /init_weights_update_group replaces it)",
    (Route("/destroy_weights_update_group"),),
)
PAUSE_MODES = Feature(
    "pause_modes",
    "0.5.6",
    "/pause_generation {mode: abort|in_place|retract}; before it the body is ignored and "
    "every pause aborts all in-flight requests",
    (RequestField("PauseGenerationReqInput", "mode"),),
)
UPDATE_FLUSH_CACHE = Feature(
    "update_flush_cache",
    "0.5.6",
    "/update_weights_from_disk flush_cache (keep the prefix cache across an update)",
    (RequestField("UpdateWeightFromDiskReqInput", "flush_cache"),),
)
MODEL_INFO_ROUTE = Feature(
    "model_info_route",
    "0.5.6",
    "GET /model_info; from the same release on, /get_model_info, /get_server_info and "
    "/get_weight_version are deprecated aliases that log a warning on every call "
    "(/get_weight_version is gone by 0.5.23)",
    (Route("/model_info"),),
)
ROUTED_EXPERTS = Feature(
    "routed_experts",
    "0.5.7",
    "/generate return_routed_experts: meta_info.routed_experts, the base64 of int32 "
    "[prompt + output - 1, num_hidden_layers, num_experts_per_tok] (the server needs "
    "--enable-return-routed-experts, layers/moe/routed_experts_capturer.py); an older release "
    "ignores the field",
    (
        RequestField("GenerateReqInput", "return_routed_experts"),
        ServerArg("enable_return_routed_experts"),
    ),
)
ACCESS_LOG_EXCLUDE = Feature(
    "access_log_exclude",
    "0.5.8",
    "--uvicorn-access-log-exclude-prefixes: the uvicorn access log leaves out every request "
    "whose path starts with one of the prefixes (utils/common.py UvicornAccessLogFilter, "
    "path.startswith(prefix))",
    (ServerArg("uvicorn_access_log_exclude_prefixes"),),
)
ROUTED_EXPERTS_START_LEN = Feature(
    "routed_experts_start_len",
    "0.5.8",
    "/generate routed_experts_start_len: return the routing from that token on",
    (RequestField("GenerateReqInput", "routed_experts_start_len"),),
)
WEIGHT_VERSION_SPANS = Feature(
    "weight_version_spans",
    "0.5.19",
    "meta_info.weight_versions: per-token weight version spans {version, start, end} "
    "(utils/weight_versions.py)",
    (Function("add_weight_versions_to_meta_info"),),
)
WEIGHT_UPDATE_SESSIONS = Feature(
    "weight_update_sessions",
    "0.5.21",
    "/begin_weight_update and /end_weight_update around /update_weights_from_distributed "
    "(from 0.5.23 a distributed update outside a session is refused: "
    "SchedulerWeightUpdaterManager)",
    (Route("/begin_weight_update"), Route("/end_weight_update")),
)
FLATTENED_BUCKET = Feature(
    "flattened_bucket",
    "0.5.21",
    "/update_weights_from_distributed load_format: flattened_bucket (one uint8 broadcast "
    "per bucket instead of one per tensor), received as 0.5.23 does "
    "(weight_updater.py _receive_bucketed_weights_from_distributed into "
    "FlattenedTensorBucket.empty); 0.5.17 to 0.5.20 take the load format through another "
    "receive path (_update_bucketed_weights_from_distributed) whose layout Dressage has not "
    "checked, so they are sent one broadcast per tensor",
    (
        RequestField("UpdateWeightsFromDistributedReqInput", "load_format"),
        Function("_receive_bucketed_weights_from_distributed"),
    ),
)
STOP_REGEX = Feature(
    "stop_regex",
    "0.5.3.post2",
    "sampling_params.stop_regex (stop when the output matches a regular expression)",
    (SamplingParam("stop_regex"),),
)
BEAM_WIDTH = Feature(
    "beam_width",
    "0.5.19",
    "sampling_params.beam_width (beam search when above 1)",
    (SamplingParam("beam_width"),),
)
WATERMARK = Feature(
    "watermark",
    "0.5.22",
    "sampling_params.watermark",
    (SamplingParam("watermark"),),
)
SCHEDULER_MOE_EP_RANK_LABEL = Feature(
    "scheduler_moe_ep_rank_label",
    "0.5.7",
    "the scheduler's metrics (sglang:num_running_reqs, ...) carry moe_ep_rank after tp_rank "
    "and pp_rank",
    (MetricLabel("scheduler", "moe_ep_rank"),),
)
TOKENIZER_ENGINE_TYPE_LABEL = Feature(
    "tokenizer_engine_type_label",
    "0.5.11",
    "the tokenizer manager's metrics (sglang:prompt_tokens_total, ...) carry engine_type "
    "after model_name",
    (MetricLabel("tokenizer", "engine_type"),),
)
PER_REQUEST_STREAMING_LABEL = Feature(
    "per_request_streaming_label",
    "0.5.17",
    "the per-request series (prompt and generation tokens, requests, time to first token, "
    "end-to-end latency) carry is_streaming (\"true\"/\"false\")",
    (MetricLabel("per_request", "is_streaming"),),
)
NULL_SAMPLING_DEFAULTS = Feature(
    "null_sampling_defaults",
    "0.5.11",
    "sampling_params: null is the default (SamplingParams.__init__, by 0.5.23 __post_init__, "
    "reads a null as the key's default); before, SamplingParams compares the value and a null "
    "temperature, top_p, top_k, min_p, penalty or min_new_tokens raises TypeError (HTTP 500)",
    tuple(NullDefault(key) for key in sorted(NULL_REFUSING_KEYS)),
)

LORA_ADAPTERS = Feature(
    "lora_adapters",
    "0.5.2",
    "LoRA adapters loaded at run time by name: /load_lora_adapter {lora_name, lora_path}, "
    "/unload_lora_adapter {lora_name}, /generate lora_path (an adapter's name), and the server "
    "flags --enable-lora, --max-lora-rank, --lora-target-modules, --max-loras-per-batch "
    "(dressage.engine.lora)",
    (
        Route("/load_lora_adapter"),
        Route("/unload_lora_adapter"),
        RequestField("GenerateReqInput", "lora_path"),
        RequestField("LoadLoRAAdapterReqInput", "lora_name"),
        ServerArg("enable_lora"),
        ServerArg("max_lora_rank"),
        ServerArg("lora_target_modules"),
        ServerArg("max_loras_per_batch"),
    ),
)

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        SAMPLING_SEED,
        DETERMINISTIC_INFERENCE,
        DESTROY_WEIGHTS_UPDATE_GROUP,
        PAUSE_MODES,
        UPDATE_FLUSH_CACHE,
        MODEL_INFO_ROUTE,
        ROUTED_EXPERTS,
        ACCESS_LOG_EXCLUDE,
        ROUTED_EXPERTS_START_LEN,
        WEIGHT_VERSION_SPANS,
        WEIGHT_UPDATE_SESSIONS,
        FLATTENED_BUCKET,
        STOP_REGEX,
        BEAM_WIDTH,
        WATERMARK,
        NULL_SAMPLING_DEFAULTS,
        SCHEDULER_MOE_EP_RANK_LABEL,
        TOKENIZER_ENGINE_TYPE_LABEL,
        PER_REQUEST_STREAMING_LABEL,
        LORA_ADAPTERS,
    )
}
"""Every versioned feature by name: the one table of what each release has."""

DETERMINISTIC_INFERENCE_SINCE = DETERMINISTIC_INFERENCE.since
MODEL_INFO_ROUTE_SINCE = MODEL_INFO_ROUTE.since
ROUTED_EXPERTS_SINCE = ROUTED_EXPERTS.since
ACCESS_LOG_EXCLUDE_SINCE = ACCESS_LOG_EXCLUDE.since

SAMPLING_PARAM_KEYS: dict[str, Feature | None] = {
    "max_new_tokens": None,
    "stop": None,
    "stop_token_ids": None,
    "stop_regex": STOP_REGEX,
    "temperature": None,
    "top_p": None,
    "top_k": None,
    "min_p": None,
    "frequency_penalty": None,
    "presence_penalty": None,
    "repetition_penalty": None,
    "min_new_tokens": None,
    "n": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "ignore_eos": None,
    "skip_special_tokens": None,
    "spaces_between_special_tokens": None,
    "no_stop_trim": None,
    "stream_interval": None,
    "logit_bias": None,
    "sampling_seed": SAMPLING_SEED,
    "custom_params": None,
    "beam_width": BEAM_WIDTH,
    "watermark": WATERMARK,
}
"""Every `sampling_params` key Dressage knows, with the feature that brings it (None: every
supported release takes it, 0.5.2's `SamplingParams.__init__` keywords), in the order of the
newest tested release's `/generate` schema (0.5.23 `api_types._FIELDS_SamplingParams`, whose
unknown-field refusal lists them so). 0.5.23's schema also admits `choice`, which its
`SamplingParams` does not take (HTTP 500; Dressage never sends it)."""

NULL_DEFAULT_KEYS: frozenset[str] = NULL_REFUSING_KEYS | {
    "n",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
}
"""The keys whose `null` a release with `NULL_SAMPLING_DEFAULTS` reads as the key's default
(0.5.23 `SamplingParams.__post_init__` and its schema decoder `api_types.
decode_SamplingParams`: `1.0 if x is None else ...`); every other key's default is null."""


def sampling_keys_of(version: str) -> tuple[str, ...]:
    """The `sampling_params` keys SGLang release `version` takes, in `SAMPLING_PARAM_KEYS`'
    order."""
    return tuple(key for key, f in SAMPLING_PARAM_KEYS.items() if f is None or supports(version, f))


def supports(version: str, feature: Feature | str) -> bool:
    """Whether SGLang release `version` has `feature` (a `.postN` release is after its base)."""
    f = FEATURES[feature] if isinstance(feature, str) else feature
    return at_least(version, f.since)
