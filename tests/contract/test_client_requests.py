"""Every request `EngineClient` sends fits SGLang's own request types at the installed release.

The client talks to a recording fake SGLang on loopback (`support.fake_sglang`) that reports
the installed release in `/get_server_info`; each recorded body is then handed to SGLang's
dataclass for that endpoint. Upstream, v0.5.2 (`python/sglang/srt/`):
- `entrypoints/http_server.py`: the routes and their methods; `/generate` takes
  `GenerateReqInput`, `/update_weights_from_disk` `UpdateWeightFromDiskReqInput`,
  `/abort_request` `AbortReq`; `/pause_generation` and `/continue_generation` take no body
  (`PauseGenerationReqInput` with `mode` arrives in v0.5.6).
- `managers/io_struct.py`: those dataclasses (an unknown key is a `TypeError` here; FastAPI
  would drop it silently, which is why the check is stricter than the server).
- `sampling/sampling_params.py`: `SamplingParams(**sampling_params)`, `normalize`, `verify`;
  no `sampling_seed` before v0.5.3.
- Distributed weight updates: `/init_weights_update_group` takes
  `InitWeightsUpdateGroupReqInput`, `/update_weights_from_distributed`
  `UpdateWeightsFromDistributedReqInput` (both answer `{"success", "message"}`);
  `/destroy_weights_update_group` (`DestroyWeightsUpdateGroupReqInput`) arrives in v0.5.3.

The newest release of the matrix (0.5.23) adds what the client must follow: the version moved
to `/model_info` (`/get_weight_version` is gone; `/get_model_info` and `/get_server_info` stay
as aliases that log a deprecation warning on every call), distributed updates need
`/begin_weight_update` ... `/end_weight_update`, `load_format: flattened_bucket`, new
`sampling_params` keys (`stop_regex`, ...) and a `/generate` schema gate
(`entrypoints/api_contract.py`).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dressage.engine import EngineClient, EngineVersionError
from dressage.engine.protocol import GenerateRequest, SamplingParams
from dressage.engine.sglang_support import (
    DESTROY_WEIGHTS_UPDATE_GROUP,
    FLATTENED_BUCKET,
    LATER_SAMPLING_PARAM_KEYS,
    MODEL_INFO_ROUTES,
    PAUSE_MODES,
    SAMPLING_SEED,
    SERVER_INFO_ROUTES,
    UPDATE_FLUSH_CACHE,
    WEIGHT_UPDATE_SESSIONS,
    WEIGHT_VERSION_ROUTES,
    supports,
)
from tests.contract.support import (
    SGLANG_VERSION,
    check_generate_body,
    fake_sglang,
    http_server_source,
    sglang_routes,
)

pytestmark = pytest.mark.contract


def deprecated_routes() -> set[str]:
    """The routes whose handler logs "Endpoint '<route>' is deprecated" on every call, in the
    release's own `http_server.py` (0.5.23: `/get_model_info`, `/get_server_info`, ...)."""
    return set(re.findall(r"Endpoint '(/[\w/]+)' is deprecated", http_server_source()))


async def test_every_call_hits_a_route_sglang_serves() -> None:
    """Every call the client makes reaches a route of the release; a route that moved is
    asked for by its newest name first, and the one 404 that costs on an older release is
    followed by the older name; no deprecated alias is ever called."""
    routes = sglang_routes()
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            await client.generate(GenerateRequest(input_ids=[1, 2, 3]))
            await client.update_weights_from_disk("/ckpt/step-1", "1")
            await client.init_weights_update_group("10.0.0.7", 29600, 1, 2)
            opened = await client.begin_weight_update()
            await client.update_weights_from_distributed(["w"], ["bfloat16"], [[2]])
            if opened:
                await client.end_weight_update()
            await client.flush_cache()
            await client.pause_generation("abort")
            await client.continue_generation()
            await client.abort_request("rid-1")
            await client.get_weight_version()
            await client.get_weight_version()
            await client.get_model_info()
            await client.sglang_version()
            await client.health()
            await client.health_generate()
        called = [(r.method, r.path) for r in fake.requests]
    assert called, "the client sent nothing"
    missing = [c for c in called if c not in routes]
    moved = {*WEIGHT_VERSION_ROUTES, *MODEL_INFO_ROUTES, *SERVER_INFO_ROUTES}
    allowed = {("GET", r) for r in moved} | {("POST", "/begin_weight_update")}
    assert set(missing) <= allowed, f"not routes of SGLang {SGLANG_VERSION}: {missing}"
    assert len(missing) == len(set(missing)), f"a missing route was asked twice: {missing}"
    assert opened is (("POST", "/begin_weight_update") in routes)
    assert not {path for _, path in called} & deprecated_routes()


@pytest.mark.parametrize(
    "req",
    [
        GenerateRequest(input_ids=[1, 2, 3]),
        GenerateRequest(
            input_ids=[1, 2, 3],
            sampling_params=SamplingParams(
                max_new_tokens=8,
                temperature=0.7,
                top_p=0.9,
                top_k=20,
                stop=["\n"],
                stop_token_ids=[2],
                min_new_tokens=1,
                ignore_eos=False,
            ),
            return_logprob=True,
            rid="r-1",
        ),
        GenerateRequest(text="hi", return_logprob=True, return_text_in_logprobs=True),
        GenerateRequest(input_ids=[4], sampling_params=SamplingParams(sampling_seed=None)),
        GenerateRequest(
            input_ids=[4],
            sampling_params=SamplingParams.model_validate({"top_k": None, "temperature": None}),
        ),
    ],
    ids=["default", "full", "text", "null-seed", "null-defaults"],
)
async def test_generate_bodies_fit_generate_req_input(req: GenerateRequest) -> None:
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            await client.generate(req)
            async for _ in client.generate_stream(req):
                pass
        bodies = fake.posted("/generate")
    assert len(bodies) == 2
    for body in bodies:
        check_generate_body(body)


async def test_a_seeded_generate_is_sent_only_to_a_release_that_takes_the_seed() -> None:
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams

    seeded = GenerateRequest(input_ids=[1], sampling_params=SamplingParams(sampling_seed=7))
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if supports(SGLANG_VERSION, SAMPLING_SEED):
                await client.generate(seeded)
                check_generate_body(fake.posted("/generate")[0])
            else:
                with pytest.raises(TypeError, match="sampling_seed"):
                    SGLangSamplingParams(max_new_tokens=4, sampling_seed=1)
                with pytest.raises(
                    EngineVersionError, match=r"sampling_seed needs SGLang >= 0\.5\.3"
                ):
                    await client.generate(seeded)
                assert fake.posted("/generate") == []


@pytest.mark.parametrize(
    ("key", "value"), [("stop_regex", "[0-9]{3}"), ("beam_width", 1), ("watermark", {})]
)
async def test_a_later_sampling_key_is_sent_only_to_a_release_that_takes_it(
    key: str, value: Any
) -> None:
    req = GenerateRequest(
        input_ids=[1], sampling_params=SamplingParams.model_validate({key: value})
    )
    feature = LATER_SAMPLING_PARAM_KEYS[key]
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if supports(SGLANG_VERSION, feature):
                await client.generate(req)
                check_generate_body(fake.posted("/generate")[0])
            else:
                with pytest.raises(EngineVersionError, match=f"sampling_params.{key} needs"):
                    await client.generate(req)
                assert fake.posted("/generate") == []


@pytest.mark.parametrize("flush_cache", [True, False])
@pytest.mark.parametrize("abort_all_requests", [False, True])
async def test_update_bodies_fit_update_weight_from_disk_req_input(
    flush_cache: bool, abort_all_requests: bool
) -> None:
    """From 0.5.6 the update loads without its own flush and the cache is flushed after,
    with a separate `/flush_cache` (0.5.23 refuses an update's flush while held requests
    run, keeping the old label); before, the update flushes itself."""
    from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqInput

    separate = supports(SGLANG_VERSION, UPDATE_FLUSH_CACHE)
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            call = client.update_weights_from_disk(
                "/ckpt/step-2", "2", abort_all_requests=abort_all_requests, flush_cache=flush_cache
            )
            if flush_cache or separate:
                await call
            else:
                with pytest.raises(EngineVersionError, match="flush_cache"):
                    await call
        bodies = fake.posted("/update_weights_from_disk")
        posted = [r.path for r in fake.requests if r.method == "POST"]
    for body in bodies:
        req = UpdateWeightFromDiskReqInput(**body)
        assert (req.model_path, req.weight_version) == ("/ckpt/step-2", "2")
        assert req.abort_all_requests is abort_all_requests
        # The release's class has `flush_cache` from 0.5.6; before, every update flushes.
        assert getattr(req, "flush_cache", True) is not separate
    if bodies:
        flushes = posted[posted.index("/update_weights_from_disk") + 1 :]
        assert flushes == (["/flush_cache"] if separate and flush_cache else [])


@pytest.mark.parametrize("mode", ["abort", "in_place", "retract"])
async def test_pause_bodies_fit_the_release(mode: str) -> None:
    from sglang.srt.managers import io_struct

    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if mode == "abort" or supports(SGLANG_VERSION, PAUSE_MODES):
                await client.pause_generation(mode)
                await client.continue_generation()
            else:
                with pytest.raises(EngineVersionError, match=r"pause mode .* >= 0\.5\.6"):
                    await client.pause_generation(mode)
        bodies = fake.posted("/pause_generation") + fake.posted("/continue_generation")
    pause_type = getattr(io_struct, "PauseGenerationReqInput", None)
    for body in bodies:
        if pause_type is None:
            # The release reads no body: anything but `{}` would be a request it ignores.
            assert body == {}
        else:
            pause_type(**body)


@pytest.mark.parametrize(("rid", "abort_all"), [("rid-1", False), (None, True)])
async def test_abort_bodies_fit_abort_req(rid: str | None, abort_all: bool) -> None:
    from sglang.srt.managers.io_struct import AbortReq

    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            await client.abort_request(rid, abort_all=abort_all)
        (body,) = fake.posted("/abort_request")
    req = AbortReq(**body)
    assert (req.rid, req.abort_all) == (rid or "", abort_all)


async def test_require_names_what_the_engine_release_lacks() -> None:
    with fake_sglang(version="0.5.2") as fake:
        async with EngineClient(fake.url) as client:
            await client.require()
            with pytest.raises(EngineVersionError) as info:
                await client.require(SAMPLING_SEED, PAUSE_MODES)
    assert "SGLang 0.5.2" in str(info.value)
    assert "sampling_seed needs SGLang >= 0.5.3" in str(info.value)
    assert "pause_modes needs SGLang >= 0.5.6" in str(info.value)
    with fake_sglang(version="0.4.10.post2") as fake:
        async with EngineClient(fake.url) as client:
            with pytest.raises(EngineVersionError, match=r"older than 0\.5\.2"):
                await client.require()


def test_the_distributed_update_routes_exist_at_the_release() -> None:
    routes = sglang_routes()
    assert ("POST", "/init_weights_update_group") in routes
    assert ("POST", "/update_weights_from_distributed") in routes
    has_destroy = ("POST", "/destroy_weights_update_group") in routes
    assert has_destroy is supports(SGLANG_VERSION, DESTROY_WEIGHTS_UPDATE_GROUP)


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
async def test_init_group_bodies_fit_init_weights_update_group_req_input(backend: str) -> None:
    from sglang.srt.managers.io_struct import InitWeightsUpdateGroupReqInput

    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            await client.init_weights_update_group(
                "10.0.0.7", 29600, 3, 5, group_name="sync", backend=backend
            )
        (body,) = fake.posted("/init_weights_update_group")
    req = InitWeightsUpdateGroupReqInput(**body)
    assert (req.master_address, req.master_port, req.rank_offset, req.world_size) == (
        "10.0.0.7",
        29600,
        3,
        5,
    )
    assert (req.group_name, req.backend) == ("sync", backend)


@pytest.mark.parametrize("weight_version", [None, "7"])
@pytest.mark.parametrize("abort_all_requests", [False, True])
@pytest.mark.parametrize("flattened", [False, True])
async def test_distributed_update_bodies_fit_update_weights_from_distributed_req_input(
    weight_version: str | None, abort_all_requests: bool, flattened: bool
) -> None:
    from sglang.srt.managers.io_struct import UpdateWeightsFromDistributedReqInput

    names = ["model.embed_tokens.weight", "model.norm.weight"]
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            opened = await client.begin_weight_update()
            call = client.update_weights_from_distributed(
                names,
                ["bfloat16", "bfloat16"],
                [[96, 64], [64]],
                weight_version=weight_version,
                abort_all_requests=abort_all_requests,
                flush_cache=False,
                flattened=flattened,
            )
            if flattened and not supports(SGLANG_VERSION, FLATTENED_BUCKET):
                with pytest.raises(EngineVersionError, match=r"flattened_bucket needs SGLang"):
                    await call
                assert fake.posted("/update_weights_from_distributed") == []
                return
            await call
            if opened:
                await client.end_weight_update()
        (body,) = fake.posted("/update_weights_from_distributed")
    req = UpdateWeightsFromDistributedReqInput(**body)
    assert (req.names, req.dtypes, req.shapes) == (names, ["bfloat16"] * 2, [[96, 64], [64]])
    assert (req.weight_version, req.abort_all_requests) == (weight_version, abort_all_requests)
    assert req.group_name == "weight_update_group"
    assert req.flush_cache is False
    assert getattr(req, "load_format", None) == ("flattened_bucket" if flattened else None)


async def test_sessions_open_and_close_where_the_release_has_them() -> None:
    """`/begin_weight_update` and `/end_weight_update` bodies are the release's classes'; on a
    release without them the client learns so from one 404 and never asks again."""
    from sglang.srt.managers import io_struct

    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            first = await client.begin_weight_update()
            if first:
                await client.end_weight_update()
            second = await client.begin_weight_update()
            if second:
                await client.end_weight_update()
        begins = fake.posted("/begin_weight_update")
        ends = fake.posted("/end_weight_update")
    has = supports(SGLANG_VERSION, WEIGHT_UPDATE_SESSIONS)
    assert (first, second) == (has, has)
    if has:
        for body in begins:
            io_struct.BeginWeightUpdateReqInput(**body)
        for body in ends:
            io_struct.EndWeightUpdateReqInput(**body)
        assert (len(begins), len(ends)) == (2, 2)
    else:
        assert not hasattr(io_struct, "BeginWeightUpdateReqInput")
        assert (len(begins), ends) == (1, [])


async def test_destroy_group_is_sent_only_to_a_release_that_has_it() -> None:
    from sglang.srt.managers import io_struct

    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if supports(SGLANG_VERSION, DESTROY_WEIGHTS_UPDATE_GROUP):
                await client.destroy_weights_update_group("sync")
                (body,) = fake.posted("/destroy_weights_update_group")
                assert io_struct.DestroyWeightsUpdateGroupReqInput(**body).group_name == "sync"
            else:
                assert not hasattr(io_struct, "DestroyWeightsUpdateGroupReqInput")
                with pytest.raises(
                    EngineVersionError,
                    match=r"destroy_weights_update_group needs SGLang >= 0\.5\.3",
                ):
                    await client.destroy_weights_update_group("sync")
                assert fake.posted("/destroy_weights_update_group") == []
