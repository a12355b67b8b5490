"""Weight updates: from disk, broadcast by the trainer (per tensor or flattened buckets, inside
weight-update sessions where the release requires them), and the cache flush.

As in SGLang, an update waits for in-flight generations (the model-update lock's writer side;
`dressage.engine.embedded.update_lock`) unless the release skips the lock while generation is
paused,
then swaps the weights at a token boundary and flushes the cache. Where the release refuses a
flush while requests run (0.5.23, e.g. requests held by an `in_place` pause), the update answers
400 with the release's message: the weights were swapped (and tokens generated from now on carry
the new version in their spans, as the scheduler records it) but the version the engine reports
stays the old one, because the call failed.

Distributed buckets are checked against the served model before they are received (every name a
parameter, every shape its shape, a float dtype). A bucket that fails the check is still
received (the sender's broadcasts must be matched, or the group falls out of step) and then
refused with HTTP 400 naming the parameter; the served weights and version are unchanged. A
bucket outside a session on a release that requires one is refused before anything is received,
as 0.5.23 does (the sender's broadcast then has no receiver).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator

import torch

from dressage.asgi import Answer, HttpRequest, json_response
from dressage.engine import flat_bucket
from dressage.engine.embedded.endpoints.common import (
    group_answer,
    parse,
    read_body,
    text_response,
)
from dressage.engine.embedded.endpoints.state import EngineState
from dressage.engine.embedded.model import ModelShape, load_weights, replace_weights
from dressage.engine.embedded.release_profiles import (
    FLUSH_REFUSED_MESSAGE,
    SESSION_NOT_OPEN_MESSAGE,
    SESSION_OPEN_MESSAGE,
    SESSION_REQUIRED_MESSAGE,
)
from dressage.engine.embedded.validation import bad_request
from dressage.engine.protocol import (
    BeginWeightUpdateRequest,
    DestroyWeightsUpdateGroupRequest,
    EndWeightUpdateRequest,
    InitWeightsUpdateGroupRequest,
    UpdateWeightsFromDiskRequest,
    UpdateWeightsFromDistributedRequest,
)
from dressage.engine.weight_group import DTYPES, WeightUpdateGroup, in_daemon_thread
from dressage.model import resolve_model_source

log = logging.getLogger("dressage.engine")

FLUSHED_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
"""`/flush_cache`'s answer (`http_server.flush_cache`, both releases)."""

NAME_TAKEN = "The specified group name has already been created, please use a different group name"
"""`torch.distributed`'s refusal of a group name the process holds (`_new_process_group_helper`)."""


@contextlib.asynccontextmanager
async def model_update(state: EngineState) -> AsyncIterator[None]:
    """Hold what a weight update holds: one update at a time, and the model-update lock's
    writer side (waiting for in-flight generations) unless the release skips it while paused."""
    async with state.update_lock:
        if state.paused and state.profile.update_skips_lock_when_paused:
            yield
            return
        async with state.model_lock.writing():
            yield


def _message(base: str, version: str | None) -> str:
    return base if version is None else f"{base} Weight version updated to {version}."


# --- from disk


async def update_weights_from_disk(state: EngineState, request: HttpRequest) -> Answer:
    req = parse(UpdateWeightsFromDiskRequest, await read_body(request))
    if req.abort_all_requests:
        # Before the lock, as the tokenizer manager does, so the lock need not wait for them.
        state.scheduler.abort(None, abort_all=True)
    async with model_update(state):
        try:
            path = resolve_model_source(req.model_path, state.config.cache_dir)
            shape = ModelShape.from_checkpoint(path)
            if not shape.same_architecture(state.shape):
                raise ValueError(
                    f"model_path: {path} has a different architecture than the served model"
                )
            weights = await asyncio.to_thread(load_weights, path, state.shape, state.config.device)
        except (ValueError, OSError) as exc:
            return _disk_answer(False, f"Failed to update weights: {exc}")
        flush = req.flush_cache and state.profile.flush_refused_while_running
        result = await asyncio.wrap_future(
            state.scheduler.swap_weights(weights, req.weight_version, abort_all=False, flush=flush)
        )
        if not result.flushed:
            log.error("%s", FLUSH_REFUSED_MESSAGE)
            return _disk_answer(False, FLUSH_REFUSED_MESSAGE)
        if req.weight_version is not None:
            state.label = req.weight_version
    state.loaded.set()
    return _disk_answer(True, _message("Succeeded to update model weights.", req.weight_version))


def _disk_answer(success: bool, message: str) -> Answer:
    return json_response(
        {"success": success, "message": message, "num_paused_requests": 0},
        200 if success else 400,
    )


# --- the weight-update group


async def init_weights_update_group(state: EngineState, request: HttpRequest) -> Answer:
    """Join the trainer's weight-update group (gloo: this engine runs on CPU, one rank).

    Answers once every rank joined. A group name the engine already holds is refused and the
    group it names kept, as SGLang does: both releases' `init_custom_process_group` reach
    `torch.distributed`'s `_new_process_group_helper`, which raises "The specified group name
    has already been created" before the new group forms (model_runner
    `init_weights_update_group` answers its failure). Only `/destroy_weights_update_group`
    (0.5.3+) frees a name.
    """
    req = parse(InitWeightsUpdateGroupRequest, await read_body(request))
    if req.backend != "gloo":
        raise bad_request(
            f"backend: the embedded engine runs on CPU and joins gloo groups only, "
            f"got {req.backend!r}"
        )
    if req.group_name in state.groups:
        message = f"Failed to initialize custom process group: {NAME_TAKEN}."
        log.error("%s", message)
        return group_answer(False, message)
    try:
        group = await in_daemon_thread(
            WeightUpdateGroup,
            master_address=req.master_address,
            master_port=req.master_port,
            rank=req.rank_offset,
            world_size=req.world_size,
            group_name=req.group_name,
            backend=req.backend,
            timeout_s=state.config.weights_group_timeout_s,
        )
    except Exception as exc:
        message = f"Failed to initialize custom process group: {exc}."
        log.error("%s", message)
        return group_answer(False, message)
    state.groups[req.group_name] = group
    return group_answer(True, "Succeeded to initialize custom process group.")


async def destroy_weights_update_group(state: EngineState, request: HttpRequest) -> Answer:
    req = parse(DestroyWeightsUpdateGroupRequest, await read_body(request, optional=True))
    group = state.groups.pop(req.group_name, None)
    if group is None:
        return group_answer(
            False, f"group_name: no weight-update group {req.group_name!r} to destroy"
        )
    group.close()
    return group_answer(True, f"Succeeded to destroy weight-update group {req.group_name!r}.")


# --- weight-update sessions (0.5.23)


async def begin_weight_update(state: EngineState, request: HttpRequest) -> Answer:
    parse(BeginWeightUpdateRequest, await read_body(request, optional=True))
    async with model_update(state):
        if state.session:
            return group_answer(False, SESSION_OPEN_MESSAGE)
        state.session = True
    return group_answer(True, "Success")


async def end_weight_update(state: EngineState, request: HttpRequest) -> Answer:
    parse(EndWeightUpdateRequest, await read_body(request, optional=True))
    async with model_update(state):
        if not state.session:
            return group_answer(False, SESSION_NOT_OPEN_MESSAGE)
        state.session = False
    return group_answer(True, "Success")


# --- distributed buckets


def bucket_problem(
    expected: dict[str, tuple[int, ...]], req: UpdateWeightsFromDistributedRequest
) -> str | None:
    """Why the served model cannot load the bucket (naming the parameter), or None."""
    seen: set[str] = set()
    for i, (name, dtype, dims) in enumerate(zip(req.names, req.dtypes, req.shapes, strict=True)):
        if dtype not in DTYPES:
            return f"dtypes[{i}]: {name}: dtype {dtype!r} is not one of {sorted(DTYPES)}"
        if any(d < 0 for d in dims):
            return f"shapes[{i}]: {name}: shape {dims} has a negative dimension"
        want = expected.get(name)
        if want is None:
            return f"names[{i}]: {name} is not a parameter of the served model"
        if tuple(dims) != want:
            return (
                f"shapes[{i}]: {name} has shape {list(want)} in the served model, "
                f"the request says {dims}"
            )
        if name in seen:
            return f"names[{i}]: {name} appears twice in the bucket"
        seen.add(name)
    return None


def drainable(
    expected: dict[str, tuple[int, ...]], req: UpdateWeightsFromDistributedRequest
) -> bool:
    """Whether a refused bucket is small enough to receive and throw away (no more elements
    than the whole served model, well-formed): receiving it keeps the group in step."""
    if any(
        dtype not in DTYPES or any(d < 0 for d in dims)
        for dtype, dims in zip(req.dtypes, req.shapes, strict=True)
    ):
        return False
    total = sum(math.prod(dims) for dims in req.shapes)
    return total <= sum(math.prod(dims) for dims in expected.values())


def _receive(
    group: WeightUpdateGroup,
    req: UpdateWeightsFromDistributedRequest,
    keep: bool,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Receive the bucket's broadcasts (one per tensor, or one flat buffer); the tensors as
    float32 on `device` when `keep`, else nothing."""
    dtypes = [DTYPES[d] for d in req.dtypes]
    loaded: dict[str, torch.Tensor] = {}

    def convert(name: str, tensor: torch.Tensor) -> None:
        if keep:
            loaded[name] = tensor.to(device=device, dtype=torch.float32).contiguous()

    if req.load_format == "flattened_bucket":
        ranges = flat_bucket.layout(req.names, dtypes, req.shapes)
        buffer = torch.empty(ranges[-1][1], dtype=torch.uint8)
        group.broadcast([buffer])
        for name, tensor in zip(
            req.names, flat_bucket.unflatten(buffer, dtypes, req.shapes, ranges), strict=True
        ):
            convert(name, tensor)
        return loaded
    tensors = [torch.empty(dims, dtype=dt) for dt, dims in zip(dtypes, req.shapes, strict=True)]
    # Convert each tensor to the serving dtype while the rest of the bucket is in flight.
    group.broadcast(tensors, lambda i, tensor: convert(req.names[i], tensor))
    return loaded


async def update_weights_from_distributed(state: EngineState, request: HttpRequest) -> Answer:
    """Receive one bucket of broadcast tensors and swap them into the served weights."""
    body = await read_body(request)
    if "load_format" in body and not state.profile.flattened_bucket:
        raise bad_request(
            f"load_format: SGLang {state.profile.release}'s /update_weights_from_distributed "
            "has no load_format (it would ignore it and expect one broadcast per tensor)"
        )
    req = parse(UpdateWeightsFromDistributedRequest, body)
    if state.profile.weight_update_sessions and not state.session:
        # 0.5.23 checks the session first, before it looks up the group or receives.
        return group_answer(False, SESSION_REQUIRED_MESSAGE)
    group = state.groups.get(req.group_name)
    if group is None:
        return group_answer(
            False,
            f"group_name: no weight-update group {req.group_name!r}; call "
            "/init_weights_update_group first",
        )
    problem = bucket_problem(state.expected, req)
    if problem is None and req.load_format == "flattened_bucket":
        try:
            flat_bucket.layout(req.names, [DTYPES[d] for d in req.dtypes], req.shapes)
        except ValueError as exc:
            return group_answer(False, f"Failed to receive weights: {exc}")
    if problem is None and state.scheduler.weights is None:
        problem = "the engine has no weights loaded yet; a distributed update replaces them"
    if problem is not None and not drainable(state.expected, req):
        return group_answer(False, f"Failed to update parameter online: {problem}")
    if req.abort_all_requests:
        state.scheduler.abort(None, abort_all=True)
    async with model_update(state):
        try:
            loaded = await in_daemon_thread(
                _receive, group, req, problem is None, state.scheduler.device
            )
        except Exception as exc:
            message = f"Failed to receive weights: {exc}"
            log.error("%s", message)
            return group_answer(False, message)
        if problem is not None:
            return group_answer(False, f"Failed to update parameter online: {problem}")
        current = state.scheduler.weights
        assert current is not None
        flush = req.flush_cache and state.profile.flush_refused_while_running
        result = await asyncio.wrap_future(
            state.scheduler.swap_weights(
                replace_weights(current, loaded), req.weight_version, abort_all=False, flush=flush
            )
        )
        if not result.flushed:
            log.error("%s", FLUSH_REFUSED_MESSAGE)
            return group_answer(False, FLUSH_REFUSED_MESSAGE)
        if req.weight_version is not None:
            state.label = req.weight_version
    return group_answer(True, _message("Succeeded to update parameter online.", req.weight_version))


# --- the cache


async def flush_cache(state: EngineState, request: HttpRequest) -> Answer:
    """`/flush_cache`: 200 when the engine is idle (it keeps no prefix cache, so idleness is
    all there is to check), else 400 with the release's text. 0.5.23 takes `?timeout=S`: wait
    up to S seconds for the engine to become idle (`SchedulerFlushWrapper`)."""
    profile = state.profile
    timeout_s = 0.0
    raw = request.query_params.get("timeout")
    if raw is not None and profile.flush_takes_timeout:
        try:
            timeout_s = float(raw)
        except ValueError:
            raise bad_request(f"timeout: {raw!r} is not a number") from None
        if not timeout_s >= 0:
            raise bad_request(f"timeout: must be >= 0, got {raw}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        idle = await asyncio.wrap_future(state.scheduler.flush())
        if idle or loop.time() >= deadline:
            break
        await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
    if idle:
        return text_response(FLUSHED_TEXT)
    failed = profile.flush_failure_text
    return text_response(FLUSHED_TEXT if failed is None else failed, 400)
