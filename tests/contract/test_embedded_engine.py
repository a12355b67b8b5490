"""The embedded engine, playing the release imported, answers as that release's own code does.

The engine process runs with `--sglang-release <the release of the tier>`. Its answers are
compared with what the release's classes produce for the same request:

- bad `sampling_params`: the release's own path (`api_contract.generate_contract_error` where
  it has the schema gate, then `SamplingParams(**params)`, `normalize`, `verify`; the
  `/generate` handler in `entrypoints/http_server.py` turns `ValueError` into 400 and lets
  `TypeError` through as 500) decides the status, and the body's shape (and 0.5.23's schema
  text, exactly);
- answers: 0.5.23's API schema (`api/v1/api_types.GenerateResponse.from_json_value`) decodes
  them, finished, streamed and aborted; their `meta_info` keys are the profile's;
- aborts: a running request's finish reason is the release's `FINISH_ABORT().to_json()`, a
  queued one's the shape of `tokenizer_manager._handle_abort_req`;
- versions: the server info reports the release, the version route the label, deprecated
  aliases log the release's warning and the client never calls them;
- weight updates: 0.5.23 refuses a flush while requests are held (and keeps the label), and a
  distributed update outside a weight-update session; `/begin_weight_update` is 404 on 0.5.2.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.engine import EngineProcess, start_engine

from dressage.engine import EngineClient
from dressage.engine.embedded.release_profiles import (
    FLUSH_REFUSED_MESSAGE,
    PROFILES,
    SESSION_NOT_OPEN_MESSAGE,
    SESSION_OPEN_MESSAGE,
    SESSION_REQUIRED_MESSAGE,
    ReleaseProfile,
    deprecation_warning,
)
from dressage.model import BUILTIN_TINY, resolve_model_source
from tests.contract.support import ServerTokenizer, schema_gate

pytest.importorskip(
    "sglang", reason="SGLang's pure-Python parts are not installed: run scripts/setup.sh"
)

pytestmark = [pytest.mark.contract, pytest.mark.integration]

CASES: list[dict[str, Any]] = [
    {"max_new_tokens": 2},
    {"max_new_tokens": 2, "temperature": 0},
    {"max_new_tokens": 2, "temperature": -1.0},
    {"max_new_tokens": 2, "top_p": 1.5},
    {"max_new_tokens": 2, "top_k": 0},
    {"max_new_tokens": 2, "temperatur": 0.5},
    {"max_new_tokens": 2, "temperature": "0.5"},
    {"max_new_tokens": 2, "top_k": None},
    {"max_new_tokens": 2, "temperature": None},
    {"max_new_tokens": 2, "n": None},
    {"max_new_tokens": 2.5},
    {"max_new_tokens": 2, "stop": 5},
    {"max_new_tokens": 2, "stop": ["\n", 3]},
    {"max_new_tokens": 2, "stop_token_ids": ["2"]},
    {"max_new_tokens": 2, "ignore_eos": "yes"},
    {"max_new_tokens": 2, "stop_regex": "[0-9]{3}"},
    {"max_new_tokens": 2, "sampling_seed": 3},
    {"max_new_tokens": 2, "sampling_seed": None},
    {"max_new_tokens": 2, "beam_width": None},
    {"max_new_tokens": 2, "choice": ["a"]},
    {"max_new_tokens": 2, "watermark": {"enabled": None, "bogus": 1}},
]


def release_status(body: dict[str, Any]) -> tuple[int, Any]:
    """What the release imported answers `body` with, by its own code: `(status, body)`,
    None for the body of an accepted request (its tokens are the engine's)."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    gate = schema_gate()
    if gate is not None:
        error = gate(body)
        if error is not None:
            return 400, {"error": error}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            params = SamplingParams(**body["sampling_params"])
            params.normalize(ServerTokenizer())
            params.verify(vocab_size=1 << 16)
        except ValueError as exc:
            return 400, {"error": {"message": str(exc)}}
        except Exception:  # TypeError, or what a str method raises on an int: not caught
            return 500, "Internal Server Error"
    return 200, None


@pytest.fixture(scope="module")
def profile(sglang_release: str) -> ReleaseProfile:
    if sglang_release not in PROFILES:
        pytest.skip(f"no embedded-engine profile for SGLang {sglang_release} (not tested)")
    return PROFILES[sglang_release]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = tmp_path_factory.mktemp("engine-cache")
    resolve_model_source(BUILTIN_TINY, path)
    return path


@pytest.fixture(scope="module")
def engine(cache: Path, profile: ReleaseProfile) -> Iterator[EngineProcess]:
    with start_engine(cache_dir=cache, sglang_release=profile.release) as process:
        yield process


@pytest.mark.parametrize("params", CASES, ids=[str(sorted(c.items())) for c in CASES])
async def test_sampling_params_get_the_releases_answer(
    engine: EngineProcess, profile: ReleaseProfile, params: dict[str, Any]
) -> None:
    body = {"input_ids": [1, 2], "sampling_params": params}
    status, expected = release_status(body)
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(engine.base_url + "/generate", json=body)
    field = next((k for k in params if k != "max_new_tokens"), "max_new_tokens")
    if status == 200 and field in profile.lax_type_keys and answer.status_code == 500:
        # The release takes the wrongly typed value without a look; the engine does not
        # guess its meaning (`ReleaseProfile.lax_type_keys`).
        assert answer.text == "Internal Server Error"
        return
    assert answer.status_code == status, answer.text
    if status == 500:
        assert answer.text == expected
    elif status == 400 and isinstance(expected["error"], str):
        assert answer.json() == expected  # the schema gate's own words
    elif status == 400:
        assert field in answer.json()["error"]["message"]


async def test_finished_and_streamed_answers_have_the_releases_keys(
    engine: EngineProcess, profile: ReleaseProfile
) -> None:
    params = {"max_new_tokens": 3, "ignore_eos": True, "temperature": 0}
    body = {"input_ids": [1, 2], "sampling_params": params}
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=60) as client:
        plain = (await client.post("/generate", json=body)).json()
        logprobs = (await client.post("/generate", json={**body, "return_logprob": True})).json()
        chunks = []
        async with client.stream("POST", "/generate", json={**body, "stream": True}) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: {"):
                    chunks.append(httpx.Response(200, content=line[6:]).json())
    keys = set(profile.meta_info_keys)
    assert set(plain["meta_info"]) == keys
    assert set(logprobs["meta_info"]) == keys | {"output_token_logprobs"}
    assert set(chunks[-1]["meta_info"]) == keys
    assert all(set(c["meta_info"]) == keys - {"e2e_latency"} for c in chunks[:-1])
    ids = [c["output_ids"] for c in chunks]
    if profile.stream_output_ids == "incremental":
        assert [t for chunk in ids for t in chunk] == plain["output_ids"]
    else:
        assert ids[-1] == plain["output_ids"]
    for answer in (plain, logprobs, *chunks):
        decoded = decode(answer)
        if decoded is not None:
            assert decoded.meta_info.completion_tokens == answer["meta_info"]["completion_tokens"]


def decode(answer: dict[str, Any]) -> Any:
    """`answer` decoded by the release's API schema (0.5.23), None without one."""
    try:
        from sglang.api.v1.api_types import GenerateResponse
    except ImportError:
        return None
    return GenerateResponse.from_json_value(answer)


@pytest.fixture(scope="module")
def one_slot(cache: Path, profile: ReleaseProfile) -> Iterator[EngineProcess]:
    """One running slot and slow tokens: a second request waits in the queue."""
    with start_engine(
        cache_dir=cache, max_batch_size=1, min_step_interval_ms=20, sglang_release=profile.release
    ) as process:
        yield process


async def first_chunk(client: httpx.AsyncClient, body: dict[str, Any]) -> asyncio.Task[Any]:
    """Stream `body` in a task and return once its first token arrived (it runs)."""
    started = asyncio.Event()

    async def run() -> list[dict[str, Any]]:
        out = []
        async with client.stream("POST", "/generate", json={**body, "stream": True}) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: {"):
                    out.append(httpx.Response(200, content=line[6:]).json())
                    started.set()
        return out

    task = asyncio.create_task(run())
    await asyncio.wait_for(started.wait(), 60)
    return task


async def test_aborts_are_shaped_as_the_release_shapes_them(
    one_slot: EngineProcess, profile: ReleaseProfile
) -> None:
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    long = {
        "input_ids": [1, 2],
        "rid": "running",
        "sampling_params": {"max_new_tokens": 500, "ignore_eos": True},
    }
    queued = {**long, "rid": "queued", "return_logprob": True}
    async with httpx.AsyncClient(base_url=one_slot.base_url, timeout=60) as client:
        running = await first_chunk(client, long)
        waiting = asyncio.create_task(client.post("/generate", json=queued))
        await asyncio.sleep(0)  # let it be sent; the one slot is taken, so it queues
        async with EngineClient(one_slot.base_url) as engine:
            await until(lambda: _queued(client, profile), "the second request to queue")
            await engine.abort_request("queued")
            await engine.abort_request("running")
        queued_answer = (await asyncio.wait_for(waiting, 60)).json()
        chunks = await asyncio.wait_for(running, 60)
    running_answer = chunks[-1]
    assert running_answer["meta_info"]["finish_reason"] == FINISH_ABORT().to_json()
    streamed = [t for c in chunks for t in c["output_ids"]]
    tokens = (
        streamed if profile.stream_output_ids == "incremental" else running_answer["output_ids"]
    )
    assert len(tokens) == running_answer["meta_info"]["completion_tokens"] > 0
    finish = {"type": "abort", "message": profile.aborts.queued_message}
    meta = queued_answer["meta_info"]
    assert meta["finish_reason"] == finish
    assert meta["completion_tokens"] == 0
    if profile.aborts.queued_has_output:
        assert queued_answer["output_ids"] == []
        assert "prompt_tokens" not in meta
        assert meta["weight_versions"] == [
            {"version": meta["weight_version"], "start": 0, "end": 0}
        ]
        assert meta["output_token_logprobs"] == []
    else:
        assert "output_ids" not in queued_answer
        assert meta["prompt_tokens"] == 0
        assert set(meta) == {"id", "finish_reason", "prompt_tokens", "completion_tokens"}
    for answer in (queued_answer, running_answer):
        decode(answer)


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _queued(client: httpx.AsyncClient, profile: ReleaseProfile) -> bool:
    """Whether the scheduler holds a waiting request (its internal state, via server info)."""
    info = (await client.get(profile.server_info_route)).json()
    return bool(info["internal_states"][0]["waiting"])


async def test_the_engine_reports_its_release_and_version_where_the_release_does(
    engine: EngineProcess, profile: ReleaseProfile
) -> None:
    async with EngineClient(engine.base_url) as client:
        assert await client.sglang_version() == profile.release
        assert await client.get_weight_version() == "v0"
        assert (await client.get_model_info()).weight_version == "v0"
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as http:
        version = (await http.get(profile.weight_version_route)).json()
        assert version["weight_version"] == "v0"
        for path in ("/get_weight_version", "/model_info", "/server_info"):
            served = ("GET", path) in profile.routes
            assert ((await http.get(path)).status_code == 404) is not served
        assert _warnings(engine, profile) == []  # the client called no deprecated alias
        for alias in profile.deprecated:
            assert (await http.get(alias)).status_code == 200

    async def all_logged() -> bool:
        return len(_warnings(engine, profile)) >= len(profile.deprecated)

    # Each deprecated call logged the release's warning, once.
    await until(all_logged, "the deprecation warnings")
    assert len(_warnings(engine, profile)) == len(profile.deprecated)


def _warnings(engine: EngineProcess, profile: ReleaseProfile) -> list[str]:
    texts = [deprecation_warning(a, r) for a, r in profile.deprecated.items()]
    return [line for line in list(engine.output) if any(t in line for t in texts)]


async def test_a_flush_that_finds_requests_held_fails_the_update_where_the_release_refuses_it(
    one_slot: EngineProcess, profile: ReleaseProfile, cache: Path
) -> None:
    """0.5.23 (paused `in_place`, a request held): the update with its flush answers 400 with
    the release's message and the version stays; the client's update (load without the flush,
    then `/flush_cache`) moves it. On 0.5.2 every pause aborts, so the update succeeds."""
    checkpoint = str(resolve_model_source(BUILTIN_TINY, cache))
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
    async with (
        httpx.AsyncClient(base_url=one_slot.base_url, timeout=60) as http,
        EngineClient(one_slot.base_url) as client,
    ):
        held = await first_chunk(http, body)
        await client.pause_generation("in_place" if profile.pause_modes else "abort")
        raw = await http.post(
            "/update_weights_from_disk", json={"model_path": checkpoint, "weight_version": "v1"}
        )
        if profile.flush_refused_while_running:
            assert raw.status_code == 400
            assert raw.json() == {
                "success": False,
                "message": FLUSH_REFUSED_MESSAGE,
                "num_paused_requests": 0,
            }
            assert await client.get_weight_version() == "v0"
            assert not await client.flush_cache()
            await client.update_weights_from_disk(checkpoint, "v1")
        else:
            assert raw.status_code == 200, raw.text
        assert await client.get_weight_version() == "v1"
        await client.continue_generation()
        await client.abort_request(abort_all=True)
        await asyncio.wait_for(held, 60)
        await client.update_weights_from_disk(checkpoint, "v0")
        assert await client.flush_cache()


async def test_distributed_updates_need_a_session_where_the_release_has_them(
    engine: EngineProcess, profile: ReleaseProfile
) -> None:
    """Outside a session the update is refused before anything else is looked at (0.5.23
    checks the session before the group, and receives nothing); a release without sessions
    has no `/begin_weight_update`."""
    bucket = {"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[64]]}
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as http:
        begin = await http.post("/begin_weight_update", json={})
        if not profile.weight_update_sessions:
            assert begin.status_code == 404
            return
        assert begin.json() == {"success": True, "message": "Success"}
        again = await http.post("/begin_weight_update", json={})
        assert again.status_code == 400
        assert again.json() == {"success": False, "message": SESSION_OPEN_MESSAGE}
        ended = await http.post("/end_weight_update", json={})
        assert ended.json() == {"success": True, "message": "Success"}
        outside = await http.post("/update_weights_from_distributed", json=bucket)
        unopened = await http.post("/end_weight_update", json={})
    assert outside.status_code == 400
    assert outside.json() == {"success": False, "message": SESSION_REQUIRED_MESSAGE}
    assert unopened.json() == {"success": False, "message": SESSION_NOT_OPEN_MESSAGE}


async def test_a_request_past_the_queue_limit_gets_sglangs_503(
    cache: Path, profile: ReleaseProfile
) -> None:
    """`--max-queued-requests` as SGLang's: with the one slot busy and no room to wait, the
    next request is turned away with the body SGLang's own `ErrorResponse` renders
    (`entrypoints/http_server.py`'s `HTTPException` handler), and served again once the slot is
    free."""
    from sglang.srt.entrypoints.openai.protocol import ErrorResponse

    expected = ErrorResponse(
        object="error", message="The request queue is full.", type="503", code=503
    ).model_dump()
    limits = ["--max-queued-requests", "0"]
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}}
    with start_engine(
        cache_dir=cache,
        max_batch_size=1,
        min_step_interval_ms=50,
        extra_args=limits,
        sglang_release=profile.release,
    ) as engine:
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=60) as client:
            async with client.stream("POST", "/generate", json={**body, "stream": True}) as long:
                assert long.status_code == 200
                lines = long.aiter_lines()
                await anext(lines)  # the first chunk: the request holds the only slot
                refused = await client.post("/generate", json=body)
                async for _ in lines:
                    pass
            served = await client.post("/generate", json=body)
    assert refused.status_code == 503
    assert refused.json() == expected
    assert served.status_code == 200, served.text
