"""Control and information: `/pause_generation`, `/continue_generation`, `/abort_request`,
the version, model and server info routes and `/ready`, as the release the engine plays
answers them.

Pause (SGLang's tokenizer manager `pause_generation`): new generations wait from now on; in
`abort` mode every in-flight one is aborted, and 0.5.23 answers only once they have all
returned (it polls the model-update lock until it is free); `in_place` holds them where they
are, `retract` gives up their KV cache (0.5.23; 0.5.2 reads no body, so every pause aborts).

The version and model info are the HTTP side's own fields (no scheduler round trip), so they
answer while generation is paused and during a weight update; the server info asks the
scheduler for its internal state (`get_internal_state`), as SGLang does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from dressage.asgi import Answer, HttpRequest, json_response
from dressage.engine.embedded.endpoints.common import empty_response, parse, read_body
from dressage.engine.embedded.endpoints.state import EngineState
from dressage.engine.protocol import AbortRequest, PauseGenerationRequest


async def pause_generation(state: EngineState, request: HttpRequest) -> Answer:
    profile = state.profile
    if profile.pause_modes:
        mode = parse(PauseGenerationRequest, await read_body(request, optional=True)).mode
    else:
        mode = "abort"  # 0.5.2's handler takes no body: every pause aborts
    state.unpaused.clear()
    await asyncio.wrap_future(state.scheduler.pause(mode))
    if mode == "abort" and profile.pause_modes:
        await state.model_lock.wait_idle()
    return json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(state: EngineState, request: HttpRequest) -> Answer:
    await asyncio.wrap_future(state.scheduler.resume())
    state.unpaused.set()
    return json_response({"message": "Generation continued successfully.", "status": "ok"})


async def abort_request(state: EngineState, request: HttpRequest) -> Answer:
    req = parse(AbortRequest, await read_body(request, optional=True))
    if req.rid or req.abort_all:
        state.scheduler.abort(req.rid or None, req.abort_all)
    return empty_response()


async def weight_version(state: EngineState, request: HttpRequest) -> Answer:
    """0.5.2 `/get_weight_version`."""
    return json_response({"weight_version": state.label})


async def model_info(state: EngineState, request: HttpRequest) -> Answer:
    """0.5.2 `/get_model_info`; 0.5.23 `/model_info` (more keys, the version among them)."""
    config = state.config
    info: dict[str, Any] = {
        "model_path": config.model_source,
        "tokenizer_path": str(config.model_path),
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": state.label,
    }
    if state.profile.model_info_route == "/model_info":
        info = {
            "model_path": config.model_source,
            "served_model_name": config.model_source,
            **{k: v for k, v in info.items() if k != "model_path"},
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen2" if state.shape.architecture.startswith("Qwen2") else "llama",
            "architectures": [state.shape.architecture],
        }
    return json_response(info)


async def server_info(state: EngineState, request: HttpRequest) -> Answer:
    """The engine's settings, the scheduler's internal state and `version`: the release the
    engine plays."""
    internal = await asyncio.wrap_future(state.scheduler.internal_state())
    config = state.config
    return json_response(
        {
            "model_path": config.model_source,
            "tp_size": 1,
            "weight_version": state.label,
            "context_length": state.context_length,
            "max_running_requests": config.max_batch_size,
            "random_seed": config.seed,
            "device": config.device,
            "peak_memory_bytes": peak_memory_bytes(config.device),
            "internal_states": [internal],
            "version": state.profile.release,
            # Not in SGLang: the embedded engine's cumulative step figures.
            "min_step_interval_s": state.scheduler.min_step_interval_s,
            "scheduler_stats": state.scheduler.stats.snapshot(),
        }
    )


async def ready(state: EngineState, request: HttpRequest) -> Answer:
    """0.5.23 `/ready`: 200 once started and not paused (`is_ready`), else 503."""
    ok = state.ready() and (state.profile.ready_while_paused or not state.paused)
    return empty_response(200 if ok else 503)


def peak_memory_bytes(device: str) -> int | None:
    """Peak bytes allocated by torch on a CUDA `device` since the process started; None on
    CPU (where torch keeps no such count)."""
    if not device.startswith("cuda"):
        return None
    return int(torch.cuda.max_memory_allocated(torch.device(device)))
