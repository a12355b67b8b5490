"""The embedded engine's HTTP API: the SGLang subset in `protocol`, on `dressage.asgi`.

Handlers only validate, hand work to the scheduler thread and wait for its answer, so the event
loop is never blocked by a forward pass or a checkpoint read. Every invalid request gets an HTTP
400 in SGLang's shape, `{"error": {"message": "<field>: <problem>"}}`, naming the field; no
request body can crash the server, with one exception kept from SGLang: a `sampling_params`
key SGLang's `SamplingParams` does not take, or a value of the wrong type, answers HTTP 500
(SGLang builds `SamplingParams(**sampling_params)`, and its `/generate` handler turns only
`ValueError` into 400, so the `TypeError` surfaces as a server error, v0.5.2 and later); the
message still names the field. `GET /get_server_info` reports the SGLang release whose API this
engine serves (`sglang_support.EMBEDDED_ENGINE_SGLANG_VERSION`). Until the first weights are
loaded, `/health`,
`/health_generate` and `/generate` answer 503.

Weights arrive from disk (`/update_weights_from_disk`) or broadcast by the trainer over a gloo
weight-update group (`/init_weights_update_group`, then one `/update_weights_from_distributed`
per bucket, `/destroy_weights_update_group`; `weight_group`). Each bucket is checked against the
served model before it is received, converted to float32 as its tensors arrive, and swapped in
at a token boundary; a bucket that fails the check is received and dropped (the group stays in
step) and answered 400 naming the parameter.

The HTTP loop shares the process, and the interpreter lock, with the scheduler thread's forward
passes: whatever CPU a request costs here is taken from generation when requests arrive in a
burst. So the per-request path is kept lean: the framework-free ASGI layer the proxy also
uses, and orjson.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import torch
from pydantic import ValidationError
from tokenizers import Tokenizer

from dressage.asgi import (
    Answer,
    App,
    BodyTooLarge,
    ClientDisconnected,
    Handler,
    HttpRequest,
    Route,
    StreamAnswer,
)
from dressage.engine.model import ModelShape, load_weights, parameter_shapes, replace_weights
from dressage.engine.protocol import (
    AbortRequest,
    DestroyWeightsUpdateGroupRequest,
    GenerateRequest,
    InitWeightsUpdateGroupRequest,
    PauseGenerationRequest,
    SamplingParams,
    UpdateWeightsFromDiskRequest,
    UpdateWeightsFromDistributedRequest,
)
from dressage.engine.scheduler import Request, Scheduler
from dressage.engine.sglang_support import EMBEDDED_ENGINE_SGLANG_VERSION
from dressage.engine.weight_group import DTYPES, WeightUpdateGroup, in_daemon_thread
from dressage.model import resolve_model_source

log = logging.getLogger(__name__)

HEALTH_GENERATE_TIMEOUT_S = 20.0
QUEUE_FULL_MESSAGE = "The request queue is full."
QUEUE_FULL_BODY = {
    "object": "error",
    "message": QUEUE_FULL_MESSAGE,
    "type": "503",
    "param": None,
    "code": 503,
}
"""SGLang v0.5.2's answer to a request beyond `--max-queued-requests`: the scheduler aborts it
with status 503 (`managers/scheduler.py`), `tokenizer_manager` raises `HTTPException(503)`, and
`entrypoints/http_server.py` renders an `ErrorResponse`."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted (a prompt of millions of token ids); beyond it, HTTP 413."""


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    model_source: str
    """What the user passed (`builtin:tiny` or a path); reported by /get_model_info."""
    model_path: Path
    """The checkpoint directory it resolved to."""
    cache_dir: Path | None = None
    seed: int = 0
    weight_version: str = "default"
    max_batch_size: int = 32
    context_length: int | None = None
    start_unloaded: bool = False
    """Serve without weights until the first /update_weights_from_disk."""
    min_step_interval_ms: float = 0.0
    """Never start two scheduler steps less than this apart (0: as fast as the CPU allows)."""
    weights_group_timeout_s: float = 600.0
    """Bound on joining a weight-update group and on each of its broadcasts."""
    max_queued_requests: int | None = None
    """Most requests waiting for a free slot (beyond the `max_batch_size` running ones); one
    more is turned away with SGLang's HTTP 503 "The request queue is full." (None: no limit,
    SGLang's default)."""
    device: str = "cpu"
    """Torch device of the weights, the KV cache and the forward passes (`cpu`, `cuda`,
    `cuda:N`); sampling stays on the CPU either way."""


class BadRequest(Exception):
    """A request the engine refuses; the message names the field."""


def json_response(data: Any, status: int = 200) -> Answer:
    return Answer(orjson.dumps(data), status)


def error_response(message: str, status: int = 400) -> Answer:
    return json_response({"error": {"message": message}}, status)


def empty_response(status: int = 200) -> Answer:
    return Answer(b"", status, content_type="text/plain; charset=utf-8")


_SAMPLING_TYPE_ERRORS = frozenset({"extra_forbidden", "int_from_float"})


def validation_status(exc: ValidationError) -> int:
    """500 when a `sampling_params` error is one SGLang raises as `TypeError`, else 400.

    SGLang passes `sampling_params` as keywords to `SamplingParams`: an unknown key is a
    `TypeError` at once, and a value of the wrong type one when `verify` compares it, and both
    reach the client as HTTP 500. Range errors are `ValueError`s there: HTTP 400.
    """
    for error in exc.errors():
        loc = error["loc"]
        if not loc or loc[0] != "sampling_params":
            continue
        kind = str(error["type"])
        if kind in _SAMPLING_TYPE_ERRORS or kind.endswith("_type"):
            return 500
    return 400


def describe_validation_error(exc: ValidationError) -> str:
    """`field.path: problem` for each error, e.g. `sampling_params.top_p: Input should be ...`."""
    parts = []
    for error in exc.errors()[:3]:
        path = ""
        for item in error["loc"]:
            path += f"[{item}]" if isinstance(item, int) else (f".{item}" if path else str(item))
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{path}: {message}" if path else message)
    return "; ".join(parts)


class EngineServer:
    """One embedded engine: the scheduler, the tokenizer and the HTTP app around them."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.shape = ModelShape.from_checkpoint(config.model_path)
        self.tokenizer = Tokenizer.from_file(str(config.model_path / "tokenizer.json"))
        limit = self.shape.max_position_embeddings
        self.context_length = min(config.context_length or limit, limit)
        self.scheduler = Scheduler(
            shape=self.shape,
            tokenizer=self.tokenizer,
            seed=config.seed,
            max_batch_size=config.max_batch_size,
            context_length=self.context_length,
            weight_version=config.weight_version,
            min_step_interval_s=config.min_step_interval_ms / 1000,
            device=config.device,
        )
        self.fatal_error: str | None = None
        self.on_fatal: Callable[[], None] | None = None
        self._loaded = asyncio.Event()
        self._update_lock = asyncio.Lock()
        self._active_rids: set[str] = set()
        self._groups: dict[str, WeightUpdateGroup] = {}
        self._expected = parameter_shapes(self.shape)
        self._background: set[asyncio.Task[None]] = set()
        routes = [
            ("/generate", self.generate, ("POST", "PUT")),
            ("/update_weights_from_disk", self.update_weights_from_disk, ("POST",)),
            ("/init_weights_update_group", self.init_weights_update_group, ("POST",)),
            (
                "/update_weights_from_distributed",
                self.update_weights_from_distributed,
                ("POST",),
            ),
            ("/destroy_weights_update_group", self.destroy_weights_update_group, ("POST",)),
            ("/pause_generation", self.pause_generation, ("POST",)),
            ("/continue_generation", self.continue_generation, ("POST",)),
            ("/abort_request", self.abort_request, ("POST",)),
            ("/get_weight_version", self.get_weight_version, ("GET",)),
            ("/get_model_info", self.get_model_info, ("GET",)),
            ("/get_server_info", self.get_server_info, ("GET",)),
            ("/health", self.health, ("GET",)),
            ("/health_generate", self.health_generate, ("GET",)),
        ]
        self.app = App(
            [Route(path, _guarded(handler), methods) for path, handler, methods in routes],
            fallback=_not_routed,
            lifespan=self._lifespan,
        )

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    # --- lifecycle

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        self.scheduler.start()
        if not self.config.start_unloaded:
            task = asyncio.create_task(self._initial_load())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        try:
            yield
        finally:
            for task in list(self._background):
                task.cancel()
            await asyncio.to_thread(self.scheduler.stop)
            for group in self._groups.values():
                group.close()

    async def _initial_load(self) -> None:
        try:
            weights = await asyncio.to_thread(
                load_weights, self.config.model_path, self.shape, self.config.device
            )
        except Exception as exc:
            self.fatal_error = f"loading {self.config.model_path} failed: {exc}"
            log.error("%s", self.fatal_error)
            if self.on_fatal is not None:
                self.on_fatal()
            return
        future = self.scheduler.swap_weights(weights, None, abort_all=False)
        await asyncio.wrap_future(future)
        self._loaded.set()

    def _queue_full(self) -> bool:
        """Whether one more request would wait beyond `max_queued_requests`: requests in
        flight past the running batch are the waiting queue."""
        limit = self.config.max_queued_requests
        if limit is None:
            return False
        waiting = len(self._active_rids) - self.config.max_batch_size
        return waiting >= 0 and waiting + 1 > limit

    def _ready(self) -> bool:
        return self.scheduler.loaded and self.scheduler.alive

    # --- helpers

    @staticmethod
    async def _body(request: HttpRequest, *, optional: bool = False) -> dict[str, Any]:
        raw = await request.body(MAX_BODY_BYTES)
        if not raw.strip() and optional:
            return {}
        try:
            data = orjson.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        return data

    def _prompt_ids(self, req: GenerateRequest) -> list[int]:
        if req.input_ids is not None:
            ids = req.input_ids
            field = "input_ids"
        else:
            ids = self.tokenizer.encode(req.text or "", add_special_tokens=False).ids
            field = "text"
            if not ids:
                raise BadRequest("text: the prompt is empty")
        vocab = self.shape.vocab_size
        for i, token in enumerate(ids):
            if not 0 <= token < vocab:
                raise BadRequest(f"input_ids[{i}]: token id {token} is outside [0, {vocab})")
        if len(ids) >= self.context_length:
            raise BadRequest(
                f"{field}: the prompt has {len(ids)} tokens; the context length is "
                f"{self.context_length}"
            )
        return list(ids)

    def _check_supported(self, req: GenerateRequest) -> None:
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
            ("top_logprobs_num", req.top_logprobs_num != 0, "must be 0"),
            ("logprob_start_len", req.logprob_start_len != -1, "only -1 is supported"),
        ]
        for field, bad, why in unsupported:
            if bad:
                raise BadRequest(f"{field}: {why} by the embedded engine")
        vocab = self.shape.vocab_size
        for i, token in enumerate(sp.stop_token_ids or []):
            if not 0 <= token < vocab:
                raise BadRequest(
                    f"sampling_params.stop_token_ids[{i}]: token id {token} is outside [0, {vocab})"
                )

    # --- endpoints

    async def generate(self, request: HttpRequest) -> Answer | StreamAnswer:
        try:
            req = GenerateRequest.model_validate(await self._body(request))
            self._check_supported(req)
            prompt_ids = self._prompt_ids(req)
        except ValidationError as exc:
            return error_response(describe_validation_error(exc), validation_status(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        if not self._ready():
            return error_response("the engine is not ready: weights are not loaded", 503)
        rid = req.rid or uuid.uuid4().hex
        if rid in self._active_rids:
            return error_response(f"rid: {rid!r} is already used by an in-flight request")
        if self._queue_full():
            return json_response(QUEUE_FULL_BODY, 503)

        loop = asyncio.get_running_loop()
        results: asyncio.Queue[tuple[dict[str, Any], bool]] = asyncio.Queue()

        def emit(snapshot: dict[str, Any], final: bool) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(results.put_nowait, (snapshot, final))

        self._active_rids.add(rid)
        self.scheduler.submit(
            Request(
                rid=rid,
                prompt_ids=prompt_ids,
                params=req.sampling_params,
                emit=emit,
                return_logprob=req.return_logprob,
                return_text_in_logprobs=req.return_text_in_logprobs,
                stream=req.stream,
            )
        )
        if req.stream:
            return StreamAnswer(self._stream(rid, results))
        watcher = asyncio.create_task(self._abort_on_disconnect(request, rid))
        try:
            while True:
                snapshot, final = await results.get()
                if final:
                    return json_response(snapshot)
        finally:
            watcher.cancel()
            self._active_rids.discard(rid)

    async def _stream(
        self, rid: str, results: asyncio.Queue[tuple[dict[str, Any], bool]]
    ) -> AsyncIterator[bytes]:
        final = False
        try:
            while not final:
                snapshot, final = await results.get()
                yield b"data: " + orjson.dumps(snapshot) + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            if not final:  # the client went away mid-stream
                self.scheduler.abort(rid)
            self._active_rids.discard(rid)

    async def _abort_on_disconnect(self, request: HttpRequest, rid: str) -> None:
        await request.disconnected()
        self.scheduler.abort(rid)

    async def update_weights_from_disk(self, request: HttpRequest) -> Answer:
        try:
            req = UpdateWeightsFromDiskRequest.model_validate(await self._body(request))
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        async with self._update_lock:
            try:
                path = resolve_model_source(req.model_path, self.config.cache_dir)
                shape = ModelShape.from_checkpoint(path)
                if not shape.same_architecture(self.shape):
                    raise ValueError(
                        f"model_path: {path} has a different architecture than the served model"
                    )
                weights = await asyncio.to_thread(
                    load_weights, path, self.shape, self.config.device
                )
            except (ValueError, OSError) as exc:
                message = f"Failed to update weights: {exc}"
                return json_response(
                    {"success": False, "message": message, "num_paused_requests": 0}, 400
                )
            future = self.scheduler.swap_weights(
                weights, req.weight_version, abort_all=req.abort_all_requests
            )
            await asyncio.wrap_future(future)
        self._loaded.set()
        message = "Succeeded to update model weights."
        if req.weight_version is not None:
            message += f" Weight version updated to {req.weight_version}."
        return json_response({"success": True, "message": message, "num_paused_requests": 0})

    # --- weights broadcast by the trainer

    async def init_weights_update_group(self, request: HttpRequest) -> Answer:
        """Join the trainer's weight-update group (gloo: this engine runs on CPU, one rank).

        Answers once every rank joined. A group of the same name is replaced (left first), as
        SGLang does.
        """
        try:
            req = InitWeightsUpdateGroupRequest.model_validate(await self._body(request))
            if req.backend != "gloo":
                raise BadRequest(
                    f"backend: the embedded engine runs on CPU and joins gloo groups only, "
                    f"got {req.backend!r}"
                )
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        old = self._groups.pop(req.group_name, None)
        if old is not None:
            old.close()
        try:
            group = await in_daemon_thread(
                WeightUpdateGroup,
                master_address=req.master_address,
                master_port=req.master_port,
                rank=req.rank_offset,
                world_size=req.world_size,
                group_name=req.group_name,
                backend=req.backend,
                timeout_s=self.config.weights_group_timeout_s,
            )
        except Exception as exc:
            message = f"Failed to initialize custom process group: {exc}."
            log.error("%s", message)
            return _group_answer(False, message)
        self._groups[req.group_name] = group
        return _group_answer(True, "Succeeded to initialize custom process group.")

    async def destroy_weights_update_group(self, request: HttpRequest) -> Answer:
        try:
            req = DestroyWeightsUpdateGroupRequest.model_validate(
                await self._body(request, optional=True)
            )
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        group = self._groups.pop(req.group_name, None)
        if group is None:
            return _group_answer(
                False, f"group_name: no weight-update group {req.group_name!r} to destroy"
            )
        group.close()
        return _group_answer(True, f"Succeeded to destroy weight-update group {req.group_name!r}.")

    def _bucket_problem(self, req: UpdateWeightsFromDistributedRequest) -> str | None:
        """Why this engine cannot load the bucket (naming the parameter), or None."""
        seen: set[str] = set()
        for i, (name, dtype, dims) in enumerate(
            zip(req.names, req.dtypes, req.shapes, strict=True)
        ):
            if dtype not in DTYPES:
                return f"dtypes[{i}]: {name}: dtype {dtype!r} is not one of {sorted(DTYPES)}"
            if any(d < 0 for d in dims):
                return f"shapes[{i}]: {name}: shape {dims} has a negative dimension"
            expected = self._expected.get(name)
            if expected is None:
                return f"names[{i}]: {name} is not a parameter of the served model"
            if tuple(dims) != expected:
                return (
                    f"shapes[{i}]: {name} has shape {list(expected)} in the served model, "
                    f"the request says {dims}"
                )
            if name in seen:
                return f"names[{i}]: {name} appears twice in the bucket"
            seen.add(name)
        return None

    def _drainable(self, req: UpdateWeightsFromDistributedRequest) -> bool:
        """Whether the bucket is small enough to receive and throw away (no more elements than
        the whole served model): refusing it after receiving keeps the group in step."""
        if any(
            dtype not in DTYPES or any(d < 0 for d in dims)
            for dtype, dims in zip(req.dtypes, req.shapes, strict=True)
        ):
            return False
        total = sum(math.prod(dims) for dims in req.shapes)
        return total <= sum(math.prod(dims) for dims in self._expected.values())

    async def update_weights_from_distributed(self, request: HttpRequest) -> Answer:
        """Receive one bucket of broadcast tensors and swap them into the served weights.

        The request is checked against the served model first (every name a parameter, every
        shape its shape, a float dtype). A bucket that fails the check is still received (the
        sender's broadcasts must be matched, or the group falls out of step) and then refused
        with HTTP 400 naming the parameter; the served weights and version are unchanged.
        """
        try:
            req = UpdateWeightsFromDistributedRequest.model_validate(await self._body(request))
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        group = self._groups.get(req.group_name)
        if group is None:
            return _group_answer(
                False,
                f"group_name: no weight-update group {req.group_name!r}; call "
                "/init_weights_update_group first",
            )
        problem = self._bucket_problem(req)
        if problem is None and self.scheduler.weights is None:
            problem = "the engine has no weights loaded yet; a distributed update replaces them"
        if problem is not None and not self._drainable(req):
            return _group_answer(False, f"Failed to update parameter online: {problem}")
        async with self._update_lock:
            tensors = [
                torch.empty(dims, dtype=DTYPES[dtype])
                for dtype, dims in zip(req.dtypes, req.shapes, strict=True)
            ]
            loaded: dict[str, torch.Tensor] = {}

            def arrived(i: int, tensor: torch.Tensor) -> None:
                # Convert to the serving dtype while the rest of the bucket is in flight.
                if problem is None:
                    loaded[req.names[i]] = tensor.to(
                        device=self.scheduler.device, dtype=torch.float32
                    ).contiguous()

            try:
                await in_daemon_thread(group.broadcast, tensors, arrived)
            except Exception as exc:
                message = (
                    f"Failed to update parameter online: receiving the broadcast failed: {exc}"
                )
                log.error("%s", message)
                return _group_answer(False, message)
            if problem is not None:
                return _group_answer(False, f"Failed to update parameter online: {problem}")
            current = self.scheduler.weights
            assert current is not None
            future = self.scheduler.swap_weights(
                replace_weights(current, loaded),
                req.weight_version,
                abort_all=req.abort_all_requests,
            )
            await asyncio.wrap_future(future)
        message = "Succeeded to update parameter online."
        if req.weight_version is not None:
            message += f" Weight version updated to {req.weight_version}."
        return _group_answer(True, message)

    async def pause_generation(self, request: HttpRequest) -> Answer:
        try:
            req = PauseGenerationRequest.model_validate(await self._body(request, optional=True))
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        await asyncio.wrap_future(self.scheduler.pause(req.mode))
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: HttpRequest) -> Answer:
        await asyncio.wrap_future(self.scheduler.resume())
        return json_response({"message": "Generation continued successfully.", "status": "ok"})

    async def abort_request(self, request: HttpRequest) -> Answer:
        try:
            req = AbortRequest.model_validate(await self._body(request, optional=True))
        except ValidationError as exc:
            return error_response(describe_validation_error(exc))
        except BadRequest as exc:
            return error_response(str(exc))
        if req.rid or req.abort_all:
            self.scheduler.abort(req.rid or None, req.abort_all)
        return empty_response()

    async def get_weight_version(self, request: HttpRequest) -> Answer:
        return json_response({"weight_version": self.scheduler.weight_version})

    async def get_model_info(self, request: HttpRequest) -> Answer:
        return json_response(
            {
                "model_path": self.config.model_source,
                "tokenizer_path": str(self.config.model_path),
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.scheduler.weight_version,
                "model_type": "qwen2" if self.shape.architecture.startswith("Qwen2") else "llama",
                "architectures": [self.shape.architecture],
            }
        )

    async def get_server_info(self, request: HttpRequest) -> Answer:
        """The engine's settings and the SGLang release whose API it serves (`version`)."""
        return json_response(
            {
                "version": EMBEDDED_ENGINE_SGLANG_VERSION,
                "model_path": self.config.model_source,
                "weight_version": self.scheduler.weight_version,
                "context_length": self.context_length,
                "max_running_requests": self.config.max_batch_size,
                "random_seed": self.config.seed,
                "device": self.config.device,
                "peak_memory_bytes": peak_memory_bytes(self.config.device),
                # Not in SGLang: the embedded engine's cumulative step figures.
                "min_step_interval_s": self.scheduler.min_step_interval_s,
                "scheduler_stats": self.scheduler.stats.snapshot(),
            }
        )

    async def health(self, request: HttpRequest) -> Answer:
        return empty_response(200 if self._ready() else 503)

    async def health_generate(self, request: HttpRequest) -> Answer:
        """200 when a one-token generation succeeds. A paused engine is healthy (it will
        generate once continued) and answers 200 without generating."""
        if not self._ready():
            return empty_response(503)
        if self.scheduler.paused:
            return empty_response(200)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def emit(snapshot: dict[str, Any], final: bool) -> None:
            if final:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(
                        lambda: None if done.done() else done.set_result(None)
                    )

        rid = f"HEALTH_CHECK_{uuid.uuid4().hex}"
        bos = self.shape.bos_token_id if self.shape.bos_token_id is not None else 0
        params = SamplingParams(max_new_tokens=1, temperature=0.0, sampling_seed=0)
        self.scheduler.submit(Request(rid=rid, prompt_ids=[bos], params=params, emit=emit))
        try:
            await asyncio.wait_for(done, HEALTH_GENERATE_TIMEOUT_S)
        except TimeoutError:
            self.scheduler.abort(rid)
            return empty_response(503)
        return empty_response(200)


def peak_memory_bytes(device: str) -> int | None:
    """Peak bytes allocated by torch on a CUDA `device` since the process started; None on
    CPU (where torch keeps no such count)."""
    if not device.startswith("cuda"):
        return None
    return int(torch.cuda.max_memory_allocated(torch.device(device)))


def _group_answer(success: bool, message: str) -> Answer:
    """SGLang's answer of the weight-update-group endpoints: 200, or 400 on failure."""
    return json_response({"success": success, "message": message}, 200 if success else 400)


def _guarded(handler: Handler) -> Handler:
    """`handler`, with a body too large answered 413, a client gone mid-body 400, and any
    other exception logged and answered 500: no request takes the server down."""

    async def guarded(request: HttpRequest) -> Answer | StreamAnswer:
        try:
            return await handler(request)
        except BodyTooLarge as exc:
            return error_response(f"request body: {exc}", 413)
        except ClientDisconnected as exc:
            return error_response(str(exc))
        except Exception as exc:
            log.exception("error handling %s %s", request.method, request.path)
            return error_response(f"internal error: {type(exc).__name__}: {exc}", 500)

    return guarded


def _not_routed(request: HttpRequest, known_path: bool) -> Answer:
    if known_path:
        return error_response(f"method {request.method} is not allowed on {request.path}", 405)
    return error_response(f"no such endpoint: {request.path}", 404)
