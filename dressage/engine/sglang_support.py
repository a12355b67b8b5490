"""Which SGLang releases Dressage supports, and which release each API feature needs.

`SGLANG_PINNED_VERSION` (defined in `dressage.api.sglang`, which the job model and the
operator read) is the release the engine image runs; `SGLANG_MIN_VERSION` is the oldest release
the client talks to at all.

`FEATURES` lists what not every supported release has, each with the first release known to
have it and the upstream file that shows it (read in the release wheels on PyPI, whose
`sglang/srt/` tree is the tag's `python/sglang/srt/`). Where only the releases of the tested
matrix were read, `since` is the first tested release that has the feature: it may have arrived
earlier, and a release in between is then treated as lacking it (the safe side: it is sent the
older request). The client (`EngineClient`) reads the engine's release from its server-info
route (`version`) and sends only what that release accepts; `require` turns a job that needs a
feature the engine lacks into one error at startup, naming the feature and the release it
needs, instead of a silent difference at run time (SGLang ignores unknown top-level request
fields, and before the pause modes every `/pause_generation` aborts all requests).

Routes that moved between releases are found by asking: the client and the proxy try the
newest name first and fall back to the older one on HTTP 404 (`WEIGHT_VERSION_ROUTES`,
`MODEL_INFO_ROUTES`, `SERVER_INFO_ROUTES`), remembering per engine which one answered, so no
release is asked for a deprecated alias (0.5.23 logs a warning on every `/get_model_info` and
`/get_server_info`) and none needs its number known first.

How the embedded engine plays each tested release is in `dressage.engine.embedded.release_profiles`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dressage.api.sglang import DETERMINISTIC_INFERENCE_SINCE, ROUTED_EXPERTS_SINCE
from dressage.api.sglang import SGLANG_MIN_VERSION as SGLANG_MIN_VERSION
from dressage.api.sglang import SGLANG_PINNED_VERSION as SGLANG_PINNED_VERSION
from dressage.api.sglang import parse_version as parse_version


@dataclass(frozen=True)
class Feature:
    """An SGLang API feature Dressage uses that not every supported release has."""

    name: str
    since: str
    """The first release known to have it (see the module docstring)."""
    what: str
    upstream: str
    """The file (under `python/sglang/srt/`) of release `since` that shows it."""


SAMPLING_SEED = Feature(
    "sampling_seed",
    DETERMINISTIC_INFERENCE_SINCE,
    "sampling_params.sampling_seed (per-request seed; the sampler uses it only when the server "
    "runs with --enable-deterministic-inference); 0.5.3 to 0.5.9 refuse an explicit null",
    "sampling/sampling_params.py (SamplingParams.__init__ keyword sampling_seed), "
    "layers/sampler.py, server_args.py (--enable-deterministic-inference)",
)
PAUSE_MODES = Feature(
    "pause_modes",
    "0.5.6",
    "/pause_generation {mode: abort|in_place|retract}; before it the body is ignored and "
    "every pause aborts all in-flight requests",
    "managers/io_struct.py (PauseGenerationReqInput.mode), entrypoints/http_server.py",
)
UPDATE_FLUSH_CACHE = Feature(
    "update_flush_cache",
    "0.5.6",
    "/update_weights_from_disk flush_cache (keep the prefix cache across an update)",
    "managers/io_struct.py (UpdateWeightFromDiskReqInput.flush_cache)",
)
DESTROY_WEIGHTS_UPDATE_GROUP = Feature(
    "destroy_weights_update_group",
    "0.5.3",
    "/destroy_weights_update_group {group_name}: leave a weight-update group (before it an "
    "engine stays in the group until it exits; a new /init_weights_update_group replaces it)",
    "managers/io_struct.py (DestroyWeightsUpdateGroupReqInput), entrypoints/http_server.py",
)
WEIGHT_VERSION_SPANS = Feature(
    "weight_version_spans",
    "0.5.19",
    "meta_info.weight_versions: per-token weight version spans {version, start, end}",
    "utils/weight_versions.py (add_weight_versions_to_meta_info)",
)
ROUTED_EXPERTS = Feature(
    "routed_experts",
    ROUTED_EXPERTS_SINCE,
    "/generate return_routed_experts: meta_info.routed_experts, the base64 of int32 "
    "[prompt + output - 1, num_hidden_layers, num_experts_per_tok] (the server needs "
    "--enable-return-routed-experts); an older release ignores the field",
    "managers/io_struct.py (GenerateReqInput.return_routed_experts), "
    "layers/moe/routed_experts_capturer.py, managers/detokenizer_manager.py",
)
ROUTED_EXPERTS_START_LEN = Feature(
    "routed_experts_start_len",
    "0.5.19",
    "/generate routed_experts_start_len: return the routing from that token on (0.5.7 has no "
    "such field; the releases in between were not read, so 0.5.19 is where it is known to be)",
    "managers/io_struct.py (GenerateReqInput.routed_experts_start_len)",
)

WEIGHT_UPDATE_SESSIONS = Feature(
    "weight_update_sessions",
    "0.5.23",
    "/begin_weight_update and /end_weight_update around /update_weights_from_distributed "
    "(0.5.23 refuses a distributed update outside a session)",
    "managers/scheduler_components/weight_updater.py (SchedulerWeightUpdaterManager."
    "begin_weight_update, update_weights_from_distributed), entrypoints/http_server.py",
)
FLATTENED_BUCKET = Feature(
    "flattened_bucket",
    "0.5.23",
    "/update_weights_from_distributed load_format: flattened_bucket (one uint8 broadcast "
    "per bucket instead of one per tensor)",
    "model_executor/model_runner_components/weight_updater.py "
    "(_receive_bucketed_weights_from_distributed), weight_sync/tensor_bucket.py "
    "(FlattenedTensorBucket.empty), managers/io_struct.py "
    "(UpdateWeightsFromDistributedReqInput.load_format)",
)
STOP_REGEX = Feature(
    "stop_regex",
    "0.5.23",
    "sampling_params.stop_regex (stop when the output matches a regular expression)",
    "sampling/sampling_params.py (SamplingParams.stop_regex), api/v1/api_types.py",
)
NULL_SAMPLING_DEFAULTS = Feature(
    "null_sampling_defaults",
    "0.5.23",
    "sampling_params: null is the default (the /generate schema gate decodes it so); before, "
    "SamplingParams compares the value and a null temperature, top_p, top_k, min_p, penalty "
    "or min_new_tokens raises TypeError (HTTP 500)",
    "entrypoints/api_contract.py, api/v1/api_types.py (decode_SamplingParams), "
    "sampling/sampling_params.py (SamplingParams.__post_init__)",
)
SAMPLING_KEYS_0_5_23 = Feature(
    "sampling_keys_0_5_23",
    "0.5.23",
    "sampling_params.beam_width and watermark",
    "api/v1/api_types.py (_FIELDS_SamplingParams)",
)

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        SAMPLING_SEED,
        PAUSE_MODES,
        UPDATE_FLUSH_CACHE,
        DESTROY_WEIGHTS_UPDATE_GROUP,
        WEIGHT_VERSION_SPANS,
        ROUTED_EXPERTS,
        ROUTED_EXPERTS_START_LEN,
        WEIGHT_UPDATE_SESSIONS,
        FLATTENED_BUCKET,
        STOP_REGEX,
        NULL_SAMPLING_DEFAULTS,
        SAMPLING_KEYS_0_5_23,
    )
}
"""Every versioned feature by name."""

BASE_SAMPLING_PARAM_KEYS: tuple[str, ...] = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "custom_params",
    "stream_interval",
    "logit_bias",
)
"""The `sampling_params` keys of every supported release: 0.5.2's `SamplingParams.__init__`
keywords, in order."""
LATER_SAMPLING_PARAM_KEYS: dict[str, Feature] = {
    "sampling_seed": SAMPLING_SEED,
    "stop_regex": STOP_REGEX,
    "beam_width": SAMPLING_KEYS_0_5_23,
    "watermark": SAMPLING_KEYS_0_5_23,
}
"""The keys that arrived later, with the feature that brings each. (0.5.23's schema also
admits `choice`, which its `SamplingParams` does not take: HTTP 500; Dressage never sends
it.)"""
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
"""The keys whose `null` 0.5.2's `SamplingParams` cannot take (it compares them: TypeError,
HTTP 500). A release without `NULL_SAMPLING_DEFAULTS` is sent such a key's null as no key at
all, which means the default there too."""

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
    return frozenset(BASE_SAMPLING_PARAM_KEYS) | {
        key for key, feature in LATER_SAMPLING_PARAM_KEYS.items() if supports(version, feature)
    }


def supports(version: str, feature: Feature | str) -> bool:
    """Whether SGLang release `version` has `feature`."""
    f = FEATURES[feature] if isinstance(feature, str) else feature
    return parse_version(version) >= parse_version(f.since)


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
