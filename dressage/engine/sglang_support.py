"""Which SGLang releases Dressage supports, and which release each API feature needs.

`SGLANG_PINNED_VERSION` (defined in `dressage.api.sglang`, which the job model and the
operator read) is the release the engine image runs (`images/sglang/Dockerfile`,
`lmsysorg/sglang:v0.5.2-cu126`) and the one the contract tests (`tests/contract/`) import.
`SGLANG_MIN_VERSION` is the oldest release the client talks to at all: every endpoint Dressage
calls exists there with a body Dressage can send (`/generate`, `/update_weights_from_disk` with
`weight_version`, `/get_weight_version`, `/pause_generation`, `/continue_generation`,
`/abort_request`, `/get_server_info` with `version`).

`FEATURES` lists what arrived later, each with the first release that has it and the upstream
file that shows it (read in the release wheels on PyPI, whose `sglang/srt/` tree is the tag's
`python/sglang/srt/`). The client (`EngineClient`) reads the engine's release from
`GET /get_server_info` (`version`) and sends only what that release accepts; `require` turns a
job that needs a feature the engine lacks into one error at startup, naming the feature and the
release it needs, instead of a silent difference at run time (SGLang ignores unknown top-level
request fields, and before the pause modes every `/pause_generation` aborts all requests).

The embedded engine implements every feature here and reports `EMBEDDED_ENGINE_SGLANG_VERSION`.
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
    """The first release that has it."""
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
    )
}
"""Every versioned feature by name."""

EMBEDDED_ENGINE_SGLANG_VERSION = "0.5.19"
"""The SGLang release whose API the embedded engine serves (the first with every feature)."""


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
