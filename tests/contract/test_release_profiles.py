"""Each embedded-engine release profile (`dressage.engine.embedded.release_profiles`) is what its
release is.

The tier runs once per release of the matrix; here the profile of the release imported is
checked against that release's own code: its route table (`entrypoints/http_server.py`), its
request classes (`managers/io_struct.py`), its sampling parameters (`sampling/
sampling_params.py`, and 0.5.23's API schema `api/v1/api_types.py`), the messages and shapes
its tokenizer manager and scheduler produce. Changing a profile without its release, or moving
the matrix to a release that behaves otherwise, turns one of these red. The embedded engine's
answers under the profile are checked against the same code in `test_embedded_engine.py`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest

from dressage.engine import sglang_support
from dressage.engine.embedded.release_profiles import (
    FLUSH_REFUSED_MESSAGE,
    PROFILES,
    SESSION_REQUIRED_MESSAGE,
    ReleaseProfile,
    deprecation_warning,
)
from dressage.engine.embedded.server import ENDPOINTS
from tests.contract.support import ServerTokenizer, sglang, sglang_routes

pytestmark = pytest.mark.contract

SRT = Path(sglang.__file__).parent / "srt"


def source(relative: str) -> str:
    """The text of `sglang/srt/<relative>` of the release imported."""
    return (SRT / relative).read_text()


@pytest.fixture(scope="module")
def profile(sglang_release: str) -> ReleaseProfile:
    if sglang_release not in PROFILES:
        pytest.skip(f"no embedded-engine profile for SGLang {sglang_release} (not tested)")
    return PROFILES[sglang_release]


def quiet_import(name: str) -> Any:
    """Import an SGLang module whose dependencies warn at import time (not ours to fix)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def fields_of(cls: type) -> list[str]:
    """The fields of an io_struct request class (a dataclass in 0.5.2, a msgspec Struct in
    0.5.23)."""
    struct_fields = getattr(cls, "__struct_fields__", None)
    if struct_fields is not None:
        return list(struct_fields)
    return [f.name for f in dataclasses.fields(cls)]


def release_sampling_keys() -> tuple[str, ...]:
    """The `sampling_params` keys the release takes: its API schema's where it has one,
    else `SamplingParams.__init__`'s keywords."""
    try:
        api_types = quiet_import("sglang.api.v1.api_types")
    except ImportError:
        from sglang.srt.sampling.sampling_params import SamplingParams

        return tuple(list(inspect.signature(SamplingParams.__init__).parameters)[1:])
    return tuple(api_types._FIELDS_SamplingParams)


def test_the_profiles_are_the_tested_matrix() -> None:
    from dressage.api.sglang import SGLANG_TESTED_RELEASES

    assert tuple(PROFILES) == SGLANG_TESTED_RELEASES


def test_the_profile_serves_routes_of_its_release_only(profile: ReleaseProfile) -> None:
    routes = sglang_routes()
    assert profile.routes <= routes, sorted(profile.routes - routes)
    assert set(profile.deprecated) <= profile.paths()
    assert set(profile.deprecated.values()) <= profile.paths()
    not_served = {path for _, path in routes if path in profile.not_served}
    assert not_served == set(profile.not_served), "not_served names routes the release lacks"
    assert not set(profile.not_served) & profile.paths()
    assert profile.paths() <= set(ENDPOINTS), "a profile route no endpoint serves"


def test_the_profile_serves_every_route_dressage_and_its_probes_call(
    profile: ReleaseProfile,
) -> None:
    """Every route of the release that Dressage calls (the engine client, the proxy, the
    publishers) and that an operator probe may use is served, so no call meets a 404 from the
    embedded engine that the release would answer."""
    routes = {path for _, path in sglang_routes()}
    used = {
        "/generate",
        "/update_weights_from_disk",
        "/init_weights_update_group",
        "/destroy_weights_update_group",
        "/begin_weight_update",
        "/end_weight_update",
        "/update_weights_from_distributed",
        "/flush_cache",
        "/pause_generation",
        "/continue_generation",
        "/abort_request",
        "/health",
        "/health_generate",
        "/ready",
        *sglang_support.WEIGHT_VERSION_ROUTES,
        *sglang_support.MODEL_INFO_ROUTES,
        *sglang_support.SERVER_INFO_ROUTES,
    }
    assert used & routes <= profile.paths(), sorted(used & routes - profile.paths())
    assert profile.weight_version_route in routes
    assert profile.model_info_route in routes
    assert profile.server_info_route in routes


def test_the_deprecated_aliases_are_the_ones_that_warn(profile: ReleaseProfile) -> None:
    """0.5.23 `http_server.get_model_info` / `get_server_info` log "Endpoint '...' is
    deprecated ..." on every call; no other route of the profile does."""
    text = source("entrypoints/http_server.py")
    for alias, route in profile.deprecated.items():
        warning = deprecation_warning(alias, route)
        # The source splits the f-string over two literals: compare without the joint.
        assert warning.replace(" ", "") in text.replace('"\n        "', "").replace(" ", "")
    for path in profile.paths() - set(profile.deprecated):
        assert f"Endpoint '{path}' is deprecated" not in text


def test_weight_update_sessions_and_flattened_buckets_are_the_releases(
    profile: ReleaseProfile,
) -> None:
    io_struct = quiet_import("sglang.srt.managers.io_struct")
    has_sessions = hasattr(io_struct, "BeginWeightUpdateReqInput")
    assert profile.weight_update_sessions is has_sessions
    assert sglang_support.supports(profile.release, sglang_support.WEIGHT_UPDATE_SESSIONS) is (
        has_sessions
    )
    if has_sessions:
        updater = source("managers/scheduler_components/weight_updater.py")
        assert SESSION_REQUIRED_MESSAGE == (
            "update_weights_from_distributed must run between "
            "begin_weight_update() and end_weight_update()"
        )
        assert '"update_weights_from_distributed must run between "' in updater
        assert '"begin_weight_update() and end_weight_update()"' in updater
    receiver = SRT / "model_executor/model_runner_components/weight_updater.py"
    flattened = "load_format" in fields_of(io_struct.UpdateWeightsFromDistributedReqInput) and (
        receiver.is_file() and "_receive_bucketed_weights_from_distributed" in receiver.read_text()
    )
    assert profile.flattened_bucket is flattened
    assert sglang_support.supports(profile.release, sglang_support.FLATTENED_BUCKET) is flattened


def test_the_flattened_layout_is_the_releases_bucket(profile: ReleaseProfile) -> None:
    """Our packing (`flat_bucket.flatten`) is what the release's `FlattenedTensorBucket`
    reconstructs, tensor for tensor, and an unaligned offset is refused by both."""
    if not profile.flattened_bucket:
        pytest.skip(f"SGLang {profile.release} has no flattened buckets")
    import torch

    from dressage.engine import flat_bucket

    bucket = quiet_import("sglang.srt.weight_sync.tensor_bucket").FlattenedTensorBucket
    tensors = [
        torch.arange(6, dtype=torch.float32).reshape(2, 3),
        torch.arange(4, dtype=torch.bfloat16),
        torch.ones(3, dtype=torch.float16),
    ]
    names = ["a", "b", "c"]
    ours = flat_bucket.flatten(tensors)
    theirs = bucket(named_tensors=list(zip(names, tensors, strict=True)))
    assert torch.equal(ours, theirs.get_flattened_tensor())
    received = bucket.empty(
        names, [t.dtype for t in tensors], [list(t.shape) for t in tensors], "cpu"
    )
    received.get_flattened_tensor().copy_(ours)
    for (name, tensor), sent in zip(received.reconstruct_tensors(), tensors, strict=True):
        assert torch.equal(tensor, sent), name
    ranges = flat_bucket.layout(names, [t.dtype for t in tensors], [list(t.shape) for t in tensors])
    assert [(m.start_idx, m.end_idx) for m in received.get_metadata()] == ranges
    odd = [torch.float16, torch.float32]
    with pytest.raises(ValueError, match="Unaligned"):
        bucket.empty(["h", "f"], odd, [[1], [1]], "cpu")
    with pytest.raises(ValueError, match="Unaligned"):
        flat_bucket.layout(["h", "f"], odd, [[1], [1]])


def release_sampling_params_fields() -> set[str]:
    """The keywords the release's `SamplingParams` class takes."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    struct_fields = getattr(SamplingParams, "__struct_fields__", None)
    if struct_fields is not None:
        return set(struct_fields)
    return set(list(inspect.signature(SamplingParams.__init__).parameters)[1:])


def test_the_sampling_keys_are_the_releases(profile: ReleaseProfile) -> None:
    """The keys `/generate` admits (the schema's, or the class's), those of them the class
    then refuses (a TypeError, HTTP 500), and the keys the client and proxy send it."""
    keys = release_sampling_keys()
    taken = release_sampling_params_fields()
    if profile.validation == "schema-gate":
        assert profile.sampling_param_keys == keys  # the refusal lists them in this order
    else:
        assert sorted(profile.sampling_param_keys) == sorted(keys)
    assert profile.schema_only_keys == set(keys) - taken
    assert sglang_support.sampling_param_keys(profile.release) == set(keys) & taken


def test_the_nulls_the_client_leaves_out_are_the_ones_the_release_refuses(
    profile: ReleaseProfile,
) -> None:
    """A `null` for a key of `NULL_REFUSING_KEYS` fails in a release without
    `NULL_SAMPLING_DEFAULTS` (so the client and the proxy leave it out there), and every
    other null passes; a release with the schema gate takes every null."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    refusing = set()
    for key in set(profile.sampling_param_keys) - profile.schema_only_keys:
        try:
            params = SamplingParams(**{key: None})
            params.normalize(ServerTokenizer())
            params.verify(vocab_size=1 << 16)
        except (TypeError, ValueError):
            refusing.add(key)
    if sglang_support.supports(profile.release, sglang_support.NULL_SAMPLING_DEFAULTS):
        assert refusing == set()
    else:
        assert refusing == sglang_support.NULL_REFUSING_KEYS


def test_the_validation_style_is_the_releases(profile: ReleaseProfile) -> None:
    try:
        quiet_import("sglang.srt.entrypoints.api_contract")
    except ImportError:
        gate = False
    else:
        gate = "generate_contract_error(await request.json())" in source(
            "entrypoints/http_server.py"
        )
    assert (profile.validation == "schema-gate") is gate


def test_the_abort_shapes_are_the_releases(profile: ReleaseProfile) -> None:
    """A running request's abort is `FINISH_ABORT()` (the release's own class); a queued
    one's message and shape are `tokenizer_manager._handle_abort_req`'s."""
    schedule_batch = quiet_import("sglang.srt.managers.schedule_batch")
    assert schedule_batch.FINISH_ABORT().to_json() == profile.aborts.running_finish
    handler = source("managers/tokenizer_manager.py")
    handler = handler[handler.index("def _handle_abort_req") :]
    handler = handler[: handler.index("\n    def ", 10)]
    assert f'"{profile.aborts.queued_message}"' in handler
    assert ('"output_ids": output_ids' in handler) is profile.aborts.queued_has_output
    assert ('"prompt_tokens": 0' in handler) is not profile.aborts.queued_has_output


def test_the_meta_info_keys_are_the_releases(profile: ReleaseProfile) -> None:
    """Every `meta_info` key of the profile is one `_handle_batch_output` sets."""
    text = source("managers/tokenizer_manager.py")
    start = text.index("def _handle_batch_output")
    handler = text[start : text.index("\n    def ", start + 10)]
    for key in profile.meta_info_keys:
        if key == "weight_versions":
            assert "add_weight_versions_to_meta_info(" in handler
        else:
            assert f'"{key}"' in handler, key
    assert ("add_weight_versions_to_meta_info(" in handler) is profile.weight_version_spans
    assert (
        sglang_support.supports(profile.release, sglang_support.WEIGHT_VERSION_SPANS)
        is profile.weight_version_spans
    )


def test_the_stream_chunks_are_the_releases(profile: ReleaseProfile) -> None:
    text = source("managers/tokenizer_manager.py")
    incremental = "state.output_ids[state.last_output_offset :]" in text
    assert (profile.stream_output_ids == "incremental") is incremental


def test_the_flush_refusal_and_the_update_lock_are_the_releases(
    profile: ReleaseProfile,
) -> None:
    updater = SRT / "managers/scheduler_components/weight_updater.py"
    refuses = updater.is_file() and (
        '"Weights were updated, but the cache was not flushed because "' in updater.read_text()
    )
    assert profile.flush_refused_while_running is refuses
    if refuses:
        assert FLUSH_REFUSED_MESSAGE.startswith("Weights were updated, but the cache")
        assert '"then call /flush_cache."' in updater.read_text()
    manager = source("managers/tokenizer_manager.py")
    disk = manager[manager.index("async def update_weights_from_disk") :]
    disk = disk[: disk.index("\n    async def ", 10)]
    assert "model_update_lock.writer_lock" in disk
    assert ("if not is_paused" in disk) is profile.update_skips_lock_when_paused


def test_pause_health_and_ready_are_the_releases(profile: ReleaseProfile) -> None:
    io_struct = quiet_import("sglang.srt.managers.io_struct")
    assert profile.pause_modes is hasattr(io_struct, "PauseGenerationReqInput")
    assert sglang_support.supports(profile.release, sglang_support.PAUSE_MODES) is (
        profile.pause_modes
    )
    server = source("entrypoints/http_server.py")
    health = server[server.index("async def health_generate(") :]
    health = health[: health.index("\n@app.")]
    assert ("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION" in health) is not profile.health_generates
    if ("GET", "/ready") in profile.routes:
        manager = source("managers/tokenizer_manager.py")
        assert "return not self.is_pause and self.is_healthy()" in manager
        assert profile.ready_while_paused is False


def test_the_version_routes_answer_without_the_scheduler(profile: ReleaseProfile) -> None:
    """The version route reads the tokenizer manager's fields (no `await`, so no scheduler
    round trip: it answers while generation is paused); the server info awaits
    `get_internal_state` (the scheduler), so it is read once, never as a probe."""
    server = source("entrypoints/http_server.py")

    def handler(path: str) -> str:
        at = server.index(f'@app.get("{path}")')
        return server[at : server.index("\n@app.", at + 10)]

    version = handler(profile.weight_version_route)
    assert "weight_version" in version
    assert "await _global_state.tokenizer_manager" not in version
    assert "get_internal_state()" in handler(profile.server_info_route)
    assert '"version": __version__' in handler(profile.server_info_route)
