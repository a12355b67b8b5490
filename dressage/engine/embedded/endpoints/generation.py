"""`/generate`, `/health` and `/health_generate`: generations, judged and answered as the
release the engine plays does.

A generation's path is SGLang's tokenizer manager's (`generate_request`): the body is judged
(`dressage.engine.embedded.validation`), the request waits while generation is paused
(`is_pause_cond`),
then holds the model-update lock's reader side for its whole life (weight updates wait for it),
and is handed to the scheduler thread, whose snapshots are shaped into the release's answer
(`shape_answer`: its `meta_info` keys, its abort shapes, its stream chunks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest, StreamAnswer, json_response
from dressage.engine.embedded.endpoints.common import (
    empty_response,
    error_response,
    read_body,
)
from dressage.engine.embedded.endpoints.state import EngineState, until_set
from dressage.engine.embedded.release_profiles import HEALTH_CHECK_TIMEOUT_S, ReleaseProfile
from dressage.engine.embedded.scheduler import Request
from dressage.engine.embedded.validation import bad_request, judge_generate
from dressage.engine.protocol import GenerateRequest, SamplingParams
from dressage.engine.sglang_support import ROUTED_EXPERTS, ROUTED_EXPERTS_START_LEN, supports

QUEUE_FULL_MESSAGE = "The request queue is full."
QUEUE_FULL_BODY = {
    "object": "error",
    "message": QUEUE_FULL_MESSAGE,
    "type": "503",
    "param": None,
    "code": 503,
}
"""SGLang's answer to a request beyond `--max-queued-requests`: the scheduler aborts it
with status 503 (`managers/scheduler.py`), `tokenizer_manager` raises `HTTPException(503)`, and
`entrypoints/http_server.py` renders an `ErrorResponse` (0.5.2 and 0.5.23 alike)."""

_SHAPED_ABORTS = frozenset({"request", "pause", "update"})
_SCHEDULER_KEYS = frozenset(
    {
        "id",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "weight_version",
        "weight_versions",
        "e2e_latency",
    }
)
"""The `meta_info` keys the scheduler puts in every snapshot, which the profile picks from;
any other key is one a request asked for (`output_token_logprobs`) and is answered as is."""
"""Abort causes answered in the release's abort shapes (a shutdown keeps its own message)."""


# --- pure: the release's answer from a scheduler snapshot


def shape_answer(
    profile: ReleaseProfile,
    snapshot: dict[str, Any],
    *,
    label: str,
    request: Request,
    final: bool,
    offset: int = 0,
) -> dict[str, Any]:
    """The answer (or stream chunk) the release sends for `snapshot`.

    `label` is the HTTP side's version label; `offset` the number of output tokens already
    streamed (for a release whose stream chunks carry only the new ones)."""
    meta = snapshot["meta_info"]
    queued_abort = final and request.abort_cause in _SHAPED_ABORTS and not request.admitted
    if queued_abort:
        return _queued_abort(profile, meta, request)
    finish = meta["finish_reason"]
    if final and request.abort_cause in _SHAPED_ABORTS:
        finish = dict(profile.aborts.running_finish)
    values: dict[str, Any] = {
        **meta,
        "finish_reason": finish,
        "weight_version": meta["weight_version"] if profile.weight_version_spans else label,
        "num_retractions": 0,
        "reasoning_tokens": 0,
    }
    out_meta = {key: values[key] for key in profile.meta_info_keys if key != "e2e_latency"}
    # What the request asked for on top (`output_token_logprobs`, ...) passes through as is.
    out_meta.update({k: v for k, v in meta.items() if k not in _SCHEDULER_KEYS})
    if final:
        out_meta["e2e_latency"] = meta["e2e_latency"]
    output_ids = snapshot["output_ids"]
    if request.stream and profile.stream_output_ids == "incremental":
        output_ids = output_ids[offset:]
    return {"text": snapshot["text"], "output_ids": output_ids, "meta_info": out_meta}


def _queued_abort(
    profile: ReleaseProfile, meta: dict[str, Any], request: Request
) -> dict[str, Any]:
    """An abort of a request that never left the waiting queue: 0.5.2
    `tokenizer_manager._handle_abort_req` (no `output_ids`, "Abort before prefill", zero token
    counts); 0.5.23 the same handler with `output_ids: []`, the version and its empty span,
    the latency and no `prompt_tokens` ("Abort in waiting queue")."""
    finish = {"type": "abort", "message": profile.aborts.queued_message}
    if not profile.aborts.queued_has_output:
        return {
            "text": "",
            "meta_info": {
                "id": meta["id"],
                "finish_reason": finish,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            },
        }
    version = meta["weight_version"]
    out: dict[str, Any] = {
        "id": meta["id"],
        "finish_reason": finish,
        "weight_version": version,
        "e2e_latency": meta["e2e_latency"],
        "weight_versions": [{"version": version, "start": 0, "end": 0}],
    }
    if request.return_logprob:
        out["input_token_logprobs"] = []
        out["output_token_logprobs"] = []
        out["output_token_logprobs_length"] = 0
    out["completion_tokens"] = 0
    return {"text": "", "output_ids": [], "meta_info": out}


# --- checks the embedded engine adds


def check_supported(state: EngineState, req: GenerateRequest) -> None:
    """400 naming the field for what the embedded engine does not implement."""
    sp: SamplingParams = req.sampling_params
    unsupported = [
        ("sampling_params.n", sp.n != 1, "only n=1 is supported"),
        ("sampling_params.frequency_penalty", sp.frequency_penalty != 0.0, "must be 0"),
        ("sampling_params.presence_penalty", sp.presence_penalty != 0.0, "must be 0"),
        ("sampling_params.repetition_penalty", sp.repetition_penalty != 1.0, "must be 1"),
        ("sampling_params.logit_bias", bool(sp.logit_bias), "is not supported"),
        ("sampling_params.regex", sp.regex is not None, "is not supported"),
        ("sampling_params.json_schema", sp.json_schema is not None, "is not supported"),
        ("sampling_params.ebnf", sp.ebnf is not None, "is not supported"),
        ("sampling_params.structural_tag", sp.structural_tag is not None, "not supported"),
        ("sampling_params.beam_width", sp.beam_width not in (None, 1), "is not supported"),
        ("sampling_params.watermark", bool(sp.watermark), "is not supported"),
        ("top_logprobs_num", req.top_logprobs_num != 0, "must be 0"),
        ("logprob_start_len", req.logprob_start_len != -1, "only -1 is supported"),
    ]
    for field, bad, why in unsupported:
        if bad:
            raise bad_request(f"{field}: {why} by the embedded engine")
    vocab = state.shape.vocab_size
    for i, token in enumerate(sp.stop_token_ids or []):
        if not 0 <= token < vocab:
            raise bad_request(
                f"sampling_params.stop_token_ids[{i}]: token id {token} is outside [0, {vocab})"
            )


def check_routed_experts(state: EngineState, req: GenerateRequest, prompt: int) -> None:
    """`return_routed_experts` as SGLang takes it: a field unknown to releases before it
    (refused like any unknown field), for MoE models only (SGLang's capturer reads
    `num_experts_per_tok` from the model's config), `routed_experts_start_len` within the
    prompt (`managers/scheduler.py`, 0.5.23)."""
    release = state.profile.release
    fields = {
        "return_routed_experts": (req.return_routed_experts, ROUTED_EXPERTS),
        "routed_experts_start_len": (
            "routed_experts_start_len" in req.model_fields_set,
            ROUTED_EXPERTS_START_LEN,
        ),
    }
    for field, (sent, feature) in fields.items():
        if sent and not supports(release, feature):
            raise bad_request(f"{field}: Extra inputs are not permitted")
    if req.return_routed_experts and state.shape.moe is None:
        raise bad_request(
            f"return_routed_experts: the served model ({state.shape.architecture}) has no "
            "MoE layers, so no experts are routed"
        )
    if req.routed_experts_start_len > prompt:
        raise bad_request(
            f"routed_experts_start_len: {req.routed_experts_start_len} is higher than the "
            f"number of input tokens {prompt}"
        )


def prompt_ids(state: EngineState, req: GenerateRequest) -> list[int]:
    if req.input_ids is not None:
        ids = req.input_ids
        field = "input_ids"
    else:
        ids = state.tokenizer.encode(req.text or "", add_special_tokens=False).ids
        field = "text"
        if not ids:
            raise bad_request("text: the prompt is empty")
    vocab = state.shape.vocab_size
    for i, token in enumerate(ids):
        if not 0 <= token < vocab:
            raise bad_request(f"input_ids[{i}]: token id {token} is outside [0, {vocab})")
    if len(ids) >= state.context_length:
        raise bad_request(
            f"{field}: the prompt has {len(ids)} tokens; the context length is "
            f"{state.context_length}"
        )
    return list(ids)


# --- endpoints


async def generate(state: EngineState, request: HttpRequest) -> Answer | StreamAnswer:
    req = judge_generate(state.profile, await read_body(request))
    check_supported(state, req)
    ids = prompt_ids(state, req)
    check_routed_experts(state, req, len(ids))
    if not state.ready():
        return error_response("the engine is not ready: weights are not loaded", 503)
    rid = req.rid or uuid.uuid4().hex
    if rid in state.active_rids:
        return error_response(f"rid: {rid!r} is already used by an in-flight request")
    run = _Run(state, Request(rid=rid, prompt_ids=ids, params=req.sampling_params, emit=_unset))
    run.request.return_logprob = req.return_logprob
    run.request.return_text_in_logprobs = req.return_text_in_logprobs
    run.request.stream = req.stream
    run.request.return_routed_experts = req.return_routed_experts
    run.request.routed_experts_start_len = req.routed_experts_start_len
    if req.lora_path is not None and state.config.lora is not None:
        # Without --enable-lora the name is ignored (0.5.2 `_tokenize_one_request`:
        # `if self.server_args.enable_lora and obj.lora_path`).
        adapters = state.scheduler.adapters
        if not adapters.serves(req.lora_path):
            # 0.5.2 `LoRARegistry.acquire`'s ValueError, a 400 from the tokenizer manager.
            return error_response(
                f"The following requested LoRA adapters are not loaded: {req.lora_path}\n"
                f"Loaded adapters: {sorted(adapters.paths)}."
            )
        run.request.lora = req.lora_path
    if req.stream:
        if state.queue_full():
            return json_response(QUEUE_FULL_BODY, 503)
        state.active_rids.add(rid)
        return StreamAnswer(run.stream())
    state.active_rids.add(rid)
    try:
        if not await _wait_unpaused(state, request):
            return empty_response(499)  # the client is gone; nothing was generated
        async with state.model_lock.reading():
            if state.queue_full():
                return json_response(QUEUE_FULL_BODY, 503)
            run.submit()
            watcher = asyncio.create_task(_abort_on_disconnect(state, request, rid))
            try:
                while True:
                    snapshot, final = await run.results.get()
                    if final:
                        return json_response(run.shape(snapshot, final=True))
            finally:
                watcher.cancel()
                run.done()
    finally:
        state.active_rids.discard(rid)


def _unset(snapshot: dict[str, Any], final: bool) -> None:
    raise AssertionError("emit is set when the request is submitted")


class _Run:
    """One generation handed to the scheduler: its results queue and answer shaping."""

    def __init__(self, state: EngineState, request: Request) -> None:
        self.state = state
        self.request = request
        self.results: asyncio.Queue[tuple[dict[str, Any], bool]] = asyncio.Queue()
        self.streamed = 0
        self._submitted = False

    def submit(self) -> None:
        loop = asyncio.get_running_loop()
        results = self.results

        def emit(snapshot: dict[str, Any], final: bool) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(results.put_nowait, (snapshot, final))

        self.request.emit = emit
        self.request.created = time.monotonic()
        self.state.scheduled += 1
        self._submitted = True
        self.state.scheduler.submit(self.request)

    def done(self) -> None:
        if self._submitted:
            self._submitted = False
            self.state.scheduled -= 1

    def shape(self, snapshot: dict[str, Any], *, final: bool) -> dict[str, Any]:
        answer = shape_answer(
            self.state.profile,
            snapshot,
            label=self.state.label,
            request=self.request,
            final=final,
            offset=self.streamed,
        )
        self.streamed = len(snapshot["output_ids"])
        return answer

    async def stream(self) -> AsyncIterator[bytes]:
        state, rid = self.state, self.request.rid
        final = False
        try:
            await state.until_unpaused()
            async with state.model_lock.reading():
                self.submit()
                try:
                    while not final:
                        snapshot, final = await self.results.get()
                        chunk = self.shape(snapshot, final=final)
                        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                    yield b"data: [DONE]\n\n"
                finally:
                    if not final:  # the client went away mid-stream
                        state.scheduler.abort(rid)
                    self.done()
        finally:
            state.active_rids.discard(rid)


async def _wait_unpaused(state: EngineState, request: HttpRequest) -> bool:
    """Wait while generation is paused (SGLang holds new generations at `is_pause_cond`);
    False when the client went away meanwhile."""
    if not state.paused:
        return True
    return await wait_unpaused(state.unpaused, request.disconnected())


async def wait_unpaused(unpaused: asyncio.Event, disconnected: Awaitable[None]) -> bool:
    """Wait until `unpaused` is set and still set when this request wakes (`until_set`);
    False once `disconnected` (the client's going away) completes first."""
    woken = asyncio.ensure_future(until_set(unpaused))
    gone = asyncio.ensure_future(disconnected)
    try:
        await asyncio.wait({woken, gone}, return_when=asyncio.FIRST_COMPLETED)
        return not gone.done()
    finally:
        woken.cancel()
        gone.cancel()


async def _abort_on_disconnect(state: EngineState, request: HttpRequest, rid: str) -> None:
    await request.disconnected()
    state.scheduler.abort(rid)


async def health(state: EngineState, request: HttpRequest) -> Answer:
    """`/health`: at once on a release whose `/health` does not generate (0.5.23: 200 once
    started), else the one-token generation of `/health_generate` (0.5.2: one handler)."""
    if not state.profile.health_generates:
        return empty_response(200 if state.ready() else 503)
    return await health_generate(state, request)


async def health_generate(state: EngineState, request: HttpRequest) -> Answer:
    """200 when a one-token generation comes back within SGLang's health timeout (20 s),
    else 503. Like any generation it waits while generation is paused and behind a weight
    update, so a health check that overlaps a pause answers 503 after the timeout, as
    SGLang's does."""
    if not state.ready():
        return empty_response(503)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def emit(snapshot: dict[str, Any], final: bool) -> None:
        if final:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lambda: None if done.done() else done.set_result(None))

    rid = f"HEALTH_CHECK_{uuid.uuid4().hex}"
    bos = state.shape.bos_token_id if state.shape.bos_token_id is not None else 0
    params = SamplingParams(max_new_tokens=1, temperature=0.0, sampling_seed=0)

    async def check() -> None:
        await state.until_unpaused()
        async with state.model_lock.reading():
            state.scheduler.submit(Request(rid=rid, prompt_ids=[bos], params=params, emit=emit))
            await done

    try:
        await asyncio.wait_for(check(), HEALTH_CHECK_TIMEOUT_S)
    except TimeoutError:
        state.scheduler.abort(rid)
        return empty_response(503)
    return empty_response(200)
