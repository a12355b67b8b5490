"""Async client for the SGLang HTTP API subset Dressage uses (shapes in `protocol`), alike
for SGLang servers on a cluster and for the embedded engine locally.

Timeouts. Control calls (health, versions, pause, abort, weight updates) use `timeout`
(default: 5 s to connect, 60 s for the rest; a weight update reads a checkpoint). Generation uses
`generate_timeout` (default: 5 s to connect, no read limit per chunk beyond 600 s), because a
long generation legitimately keeps the connection silent until it finishes; callers that need a
tighter bound wrap the call in `asyncio.timeout`.

Retries. Only where repeating cannot do harm: any call whose connection attempt failed (the
server never saw the request) and idempotent GETs that hit a transport error are retried
`retries` times with exponential backoff (0.1 s, 0.2 s, ...). A POST that reached the server is
never repeated: a second /generate would sample a different answer, a second weight update or
abort could land on other requests. After the retries, transport errors surface as
`EngineUnavailable`; HTTP errors map to `EngineRequestError` (4xx), `EngineUnavailable` (503),
`EngineServerError` (other 5xx).

Idle connections. A pooled connection is dropped after `KEEPALIVE_EXPIRY_S` idle, shorter than
SGLang's 5 s keep-alive; a request that still meets a connection the engine closed (a busy
caller's clock runs late) is sent once more on a fresh one where that is safe
(`dressage.engine.transport`), the one exception to the rule above.

SGLang releases. Features that arrived after `sglang_support.SGLANG_MIN_VERSION` are sent only
to an engine whose release has them: the release comes from `sglang_version=` or, the first
time a call needs it, from the server-info route (`version`). A call that needs a missing
feature raises `EngineVersionError` before sending anything (a `sampling_params` key the
release lacks names the key), and `require(...)` checks a job's needs once at startup. Fields
whose value is the default of every release are left out, so the same call works on old and
new releases: `pause_generation` sends `{}` for `abort` (the only behaviour before 0.5.6, the
default since). Routes that moved (the weight version, model and server info) are found by
asking, newest name first, and remembered (`sglang_support.WEIGHT_VERSION_ROUTES`, ...), so no
deprecated alias is called.

Weight updates and the cache flush. From 0.5.6 a weight update may run while requests are
held by an `in_place` pause, and 0.5.23 then refuses its cache flush (HTTP 400, the version
label kept although the weights changed). So on those releases `update_weights_from_disk`
loads with `flush_cache: false` (the label moves with the weights) and then flushes the cache
separately (`flush_cache`), which succeeds once nothing runs and is only logged when held
requests keep it from running; before 0.5.6 every update waits for in-flight requests, and
its own flush cannot fail. Distributed updates open a weight-update session where the release
has them (`begin_weight_update` ... `end_weight_update`), found by asking.

An injected `httpx.AsyncClient` (the proxy shares one across engines) is used as is and never
closed by this class; otherwise the client owns one and `aclose()` closes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx

from dressage.engine import wire
from dressage.engine.errors import (
    EngineError,
    EngineRequestError,
    EngineServerError,
    EngineUnavailable,
    EngineVersionError,
)
from dressage.engine.protocol import (
    DEFAULT_WEIGHTS_GROUP,
    AbortRequest,
    BeginWeightUpdateRequest,
    DestroyWeightsUpdateGroupRequest,
    GenerateRequest,
    GenerateResponse,
    InitWeightsUpdateGroupRequest,
    ModelInfo,
    PauseGenerationRequest,
    UpdateWeightsFromDiskRequest,
    UpdateWeightsFromDistributedRequest,
    UpdateWeightsResult,
    WeightsGroupResult,
    error_message,
)
from dressage.engine.sglang_support import (
    DESTROY_WEIGHTS_UPDATE_GROUP,
    FLATTENED_BUCKET,
    MODEL_INFO_ROUTES,
    PAUSE_MODES,
    SERVER_INFO_ROUTES,
    SGLANG_MIN_VERSION,
    UPDATE_FLUSH_CACHE,
    WEIGHT_VERSION_ROUTES,
    Feature,
    check_supported_release,
    missing,
    supports,
)
from dressage.engine.transport import CONNECT_ERRORS, OWN_LIMITS, send, tls_context

log = logging.getLogger("dressage.engine")

DEFAULT_TIMEOUT = httpx.Timeout(wire.CALL_TIMEOUT_S, connect=5.0)
DEFAULT_GENERATE_TIMEOUT = httpx.Timeout(600.0, connect=5.0)


def _call_timeout(timeout_s: float | None) -> httpx.Timeout | None:
    """One call's bound in seconds as an httpx timeout (None: the client's control timeout)."""
    return None if timeout_s is None else httpx.Timeout(timeout_s, connect=5.0)


class EngineClient:
    """Typed async client of one engine at `base_url` (e.g. `http://127.0.0.1:30000`)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        generate_timeout: httpx.Timeout | float = DEFAULT_GENERATE_TIMEOUT,
        retries: int = 2,
        client: httpx.AsyncClient | None = None,
        sglang_version: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if sglang_version is not None:
            check_supported_release(sglang_version)
        self._sglang_version = sglang_version
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._generate_timeout = (
            generate_timeout
            if isinstance(generate_timeout, httpx.Timeout)
            else httpx.Timeout(generate_timeout)
        )
        self._retries = max(0, retries)
        self._routes: dict[tuple[str, ...], str] = {}
        """Which of each group of moved routes this engine answers (found by asking)."""
        self._absent: set[str] = set()
        """Routes the engine answered 404 (its release has none of that name)."""
        self._sessions: bool | None = None
        """Whether the engine has weight-update sessions (None: not asked yet)."""
        self.stale_retries = 0
        """Requests sent again because the engine had closed their idle pooled connection."""
        self.owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.AsyncClient(limits=OWN_LIMITS, verify=tls_context())
        )

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.owns_client:
            await self._client.aclose()

    # --- generation

    async def generate(self, req: GenerateRequest) -> GenerateResponse:
        """`POST /generate` (non-streaming): the finished response."""
        body = await self._generate_body(req)
        body.pop("stream", None)
        response = await self._send(
            "POST", wire.GENERATE, json_body=body, request_timeout=self._generate_timeout
        )
        return GenerateResponse.model_validate(self._json(response))

    async def generate_stream(self, req: GenerateRequest) -> AsyncIterator[GenerateResponse]:
        """`POST /generate` with `stream: true`: cumulative snapshots, the last one finished.

        Releases differ in what a chunk's `output_ids` holds (0.5.2: the tokens since the last
        chunk; 0.5.23: all so far, like `text`, the logprobs and `completion_tokens` in both);
        a chunk with fewer ids than its `completion_tokens` is taken as new ones and added."""
        body = await self._generate_body(req) | {"stream": True}
        url = self.base_url + wire.GENERATE
        output_ids: list[int] = []
        try:
            async with self._client.stream(
                "POST", url, json=body, timeout=self._generate_timeout
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    _raise_for_status(url, response)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:") :].strip()
                    if payload == "[DONE]":
                        return
                    data = json.loads(payload)
                    if isinstance(data, dict) and "error" in data:
                        raise EngineRequestError(error_message(payload), url=url)
                    chunk = GenerateResponse.model_validate(data)
                    if len(chunk.output_ids) < chunk.meta_info.completion_tokens:
                        output_ids += chunk.output_ids
                        chunk.output_ids = list(output_ids)
                    else:
                        output_ids = list(chunk.output_ids)
                    yield chunk
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"{type(exc).__name__}: {exc}", url=url) from exc

    async def _generate_body(self, req: GenerateRequest) -> dict[str, Any]:
        """The request's body for this engine's release (`wire.body_for_release`, strict: a
        field the release lacks, the seed and the routed experts included, is
        `EngineVersionError` rather than an answer without it). A body the oldest supported
        release takes is taken by every release, so the engine's release is asked only for a
        body that needs it."""
        body = req.to_json()
        if self._sglang_version is None:
            try:
                return wire.body_for_release(body, SGLANG_MIN_VERSION, strict=True)
            except wire.UnsupportedField:
                pass
        release = await self.sglang_version()
        try:
            return wire.body_for_release(body, release, strict=True)
        except wire.UnsupportedField as exc:
            raise self._lacking(exc.field, exc.feature, release) from None

    # --- weights and versions

    async def update_weights_from_disk(
        self,
        model_path: str,
        weight_version: str | None,
        *,
        abort_all_requests: bool = False,
        flush_cache: bool = True,
        held: bool = True,
        timeout_s: float | None = None,
    ) -> UpdateWeightsResult:
        """Load new weights from `model_path`, label them `weight_version`, then flush the
        cache (`flush_cache`; see the module docstring for the order). `held=False`: no
        request is held by a pause (an `abort` pause), so the update flushes it: one request.

        `timeout_s` bounds the load (default: the client's control timeout); a large
        checkpoint read by every tensor-parallel rank can take minutes. Raises
        `EngineRequestError` when the engine reports `success: false`, and
        `EngineVersionError` for `flush_cache=False` on a release without it.
        """
        req = UpdateWeightsFromDiskRequest(
            model_path=model_path,
            weight_version=weight_version,
            abort_all_requests=abort_all_requests,
        )
        separate_flush = False
        if not flush_cache:
            await self._require_for("flush_cache=False", UPDATE_FLUSH_CACHE)
            req.flush_cache = False
        elif held and supports(await self.sglang_version(), UPDATE_FLUSH_CACHE):
            req.flush_cache = False
            separate_flush = True
        response = await self._send(
            "POST",
            wire.UPDATE_WEIGHTS_FROM_DISK,
            json_body=req.model_dump(exclude_unset=True),
            request_timeout=_call_timeout(timeout_s),
            idempotent=True,  # the same checkpoint and label again: the same weights
        )
        result = UpdateWeightsResult.model_validate(self._json(response))
        if not result.success:
            raise EngineRequestError(result.message, url=self.base_url, status_code=200)
        if separate_flush:
            await self.flush_cache()
        return result

    async def flush_cache(self, *, timeout_s: float | None = None) -> bool:
        """`/flush_cache`: drop the prefix cache. False (and a log line) when requests still
        run or wait (e.g. held by an `in_place` pause: they go on from the cache they have).
        `timeout_s` (0.5.23's `?timeout=`) lets the engine wait that long for them."""
        path = wire.FLUSH_CACHE
        if timeout_s is not None:
            path += f"?timeout={timeout_s:g}"
        try:
            await self._send("POST", path, json_body={}, idempotent=True)
        except EngineRequestError as exc:
            log.info(
                "engine %s kept its prefix cache (requests still run): %s",
                self.base_url,
                exc.message.strip(),
            )
            return False
        return True

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        *,
        group_name: str = DEFAULT_WEIGHTS_GROUP,
        backend: str = "nccl",
        timeout_s: float | None = None,
    ) -> WeightsGroupResult:
        """Have the engine join weight-update group `group_name` at ranks from `rank_offset`.

        The engine answers only once every rank joined, so rank 0 (the trainer) must be joining
        concurrently; `timeout_s` bounds the wait (default: the client's control timeout).
        `EngineRequestError` when the engine could not join.
        """
        req = InitWeightsUpdateGroupRequest(
            master_address=master_address,
            master_port=master_port,
            rank_offset=rank_offset,
            world_size=world_size,
            group_name=group_name,
            backend=backend,
        )
        return await self._group_call(wire.INIT_WEIGHTS_UPDATE_GROUP, req.model_dump(), timeout_s)

    async def update_weights_from_distributed(
        self,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        *,
        weight_version: str | None = None,
        group_name: str = DEFAULT_WEIGHTS_GROUP,
        flush_cache: bool = True,
        abort_all_requests: bool = False,
        flattened: bool = False,
        timeout_s: float | None = None,
    ) -> WeightsGroupResult:
        """Receive one bucket of tensors broadcast by rank 0 of `group_name` and load them.

        The engine answers once the bucket's broadcasts arrived and were loaded, so the sender
        broadcasts while this request is outstanding: one broadcast per tensor, or with
        `flattened` one uint8 broadcast of the whole bucket (`load_format: flattened_bucket`,
        `dressage.engine.flat_bucket`; `EngineVersionError` on a release without it).
        `weight_version` relabels the weights after the load. `EngineRequestError` (naming the
        parameter) when the engine refuses.
        """
        if flattened:
            await self._require_for("load_format flattened_bucket", FLATTENED_BUCKET)
        req = UpdateWeightsFromDistributedRequest(
            names=names,
            dtypes=dtypes,
            shapes=shapes,
            group_name=group_name,
            flush_cache=flush_cache,
            abort_all_requests=abort_all_requests,
            weight_version=weight_version,
            load_format="flattened_bucket" if flattened else None,
        )
        return await self._group_call(
            wire.UPDATE_WEIGHTS_FROM_DISTRIBUTED, req.model_dump(exclude_defaults=True), timeout_s
        )

    async def supports_flattened_buckets(self) -> bool:
        """Whether the engine's release takes `load_format: flattened_bucket`."""
        return supports(await self.sglang_version(), FLATTENED_BUCKET)

    async def begin_weight_update(self, *, timeout_s: float | None = None) -> bool:
        """Open a weight-update session (0.5.23 refuses a distributed update outside one);
        False, and nothing to end, on a release without sessions (HTTP 404, remembered).

        A session left open by a sender that died mid-publish is closed first (logged): the
        release refuses a second `begin` until `end`."""
        if self._sessions is False:
            return False
        body = BeginWeightUpdateRequest().model_dump(exclude_defaults=True)
        try:
            await self._group_call(wire.BEGIN_WEIGHT_UPDATE, body, timeout_s, idempotent=True)
        except EngineRequestError as exc:
            if exc.status_code == 404:
                self._sessions = False
                return False
            if "already open" not in exc.message:
                raise
            log.warning(
                "engine %s had a weight-update session open (a sender stopped inside one): "
                "closing it first",
                self.base_url,
            )
            await self.end_weight_update(timeout_s=timeout_s)
            await self._group_call(wire.BEGIN_WEIGHT_UPDATE, body, timeout_s)
        self._sessions = True
        return True

    async def end_weight_update(self, *, timeout_s: float | None = None) -> None:
        """Close the weight-update session `begin_weight_update` opened."""
        await self._group_call(wire.END_WEIGHT_UPDATE, {}, timeout_s)

    async def destroy_weights_update_group(
        self, group_name: str = DEFAULT_WEIGHTS_GROUP, *, timeout_s: float | None = None
    ) -> WeightsGroupResult:
        """Have the engine leave `group_name` (SGLang >= 0.5.3, `EngineVersionError` before)."""
        await self._require_for(wire.DESTROY_WEIGHTS_UPDATE_GROUP, DESTROY_WEIGHTS_UPDATE_GROUP)
        req = DestroyWeightsUpdateGroupRequest(group_name=group_name)
        return await self._group_call(
            wire.DESTROY_WEIGHTS_UPDATE_GROUP, req.model_dump(), timeout_s
        )

    async def _group_call(
        self, path: str, body: dict[str, Any], timeout_s: float | None, *, idempotent: bool = False
    ) -> WeightsGroupResult:
        response = await self._send(
            "POST",
            path,
            json_body=body,
            request_timeout=_call_timeout(timeout_s),
            idempotent=idempotent,
        )
        result = WeightsGroupResult.model_validate(self._json(response))
        if not result.success:
            raise EngineRequestError(result.message, url=self.base_url + path, status_code=200)
        return result

    async def get_weight_version(self) -> str | None:
        """The weight version the engine serves (0.5.23 `/model_info`, 0.5.2
        `/get_weight_version`: no scheduler round trip, so also while paused); None when it
        reports none, or a label that is no version (`""`, `-1`, ...: `wire.weight_version_of`)."""
        return wire.weight_version_of(self._json(await self._get_moved(WEIGHT_VERSION_ROUTES)))

    async def get_model_info(self) -> ModelInfo:
        return ModelInfo.model_validate(self._json(await self._get_moved(MODEL_INFO_ROUTES)))

    async def _get_moved(self, routes: tuple[str, ...]) -> httpx.Response:
        """GET the first of `routes` (newest first) the engine serves (`wire.first_served`):
        the one that answered before, else each in turn while they answer 404."""

        async def get(path: str) -> httpx.Response | EngineRequestError:
            try:
                return await self._send("GET", path)
            except EngineRequestError as exc:
                if exc.status_code != 404:
                    raise
                return exc

        known = self._routes.get(routes)
        path, answer = await wire.first_served(
            routes,
            get,
            lambda answer: isinstance(answer, EngineRequestError),
            known=known,
            absent=self._absent,
        )
        if known is None:
            # Every route before the one asked last was absent (asked now or before).
            self._absent.update(routes[: routes.index(path)])
        if isinstance(answer, EngineRequestError):
            raise answer
        self._routes[routes] = path
        return answer

    # --- SGLang release

    async def sglang_version(self) -> str:
        """The engine's SGLang release (given at construction, else its server-info route)."""
        if self._sglang_version is None:
            data = self._json(await self._get_moved(SERVER_INFO_ROUTES))
            try:
                version = wire.release_of(data)
                check_supported_release(version)
            except ValueError as exc:
                raise EngineVersionError(str(exc), url=self.base_url) from None
            self._sglang_version = version
        return self._sglang_version

    async def require(self, *features: Feature) -> None:
        """`EngineVersionError` naming every feature of `features` the engine's release lacks.

        Call it at startup with what the job needs (e.g. `PAUSE_MODES` for an `in_place`
        weight-update pause, `SAMPLING_SEED` for seeded rollouts).
        """
        version = await self.sglang_version()
        lacking = missing(version, features)
        if lacking:
            need = "; ".join(f"{f.name} needs SGLang >= {f.since} ({f.what})" for f in lacking)
            raise EngineVersionError(f"the engine runs SGLang {version}: {need}", url=self.base_url)

    async def _require_for(self, what: str, feature: Feature) -> None:
        version = await self.sglang_version()
        if missing(version, (feature,)):
            raise self._lacking(what, feature, version)

    def _lacking(self, what: str, feature: Feature, version: str) -> EngineVersionError:
        return EngineVersionError(
            f"{what} needs SGLang >= {feature.since} ({feature.what}); the engine runs "
            f"SGLang {version}",
            url=self.base_url,
        )

    # --- control

    async def pause_generation(self, mode: str = "abort") -> None:
        """Pause: `abort` (abort in-flight requests), `in_place` or `retract` (hold them).

        `in_place` and `retract` need SGLang >= 0.5.6 (`EngineVersionError` otherwise: an older
        engine would abort every in-flight request instead of holding it).
        """
        req = PauseGenerationRequest.model_validate({"mode": mode})
        if req.mode != "abort":
            await self._require_for(f"pause mode {req.mode!r}", PAUSE_MODES)
        body = req.model_dump(exclude_defaults=True)
        await self._send("POST", wire.PAUSE_GENERATION, json_body=body, idempotent=True)

    async def continue_generation(self) -> None:
        await self._send("POST", wire.CONTINUE_GENERATION, json_body={}, idempotent=True)

    async def abort_request(self, rid: str | None = None, abort_all: bool = False) -> None:
        """Abort one request by rid, or all; an unknown rid is not an error (as in SGLang)."""
        body = AbortRequest(rid=rid, abort_all=abort_all).model_dump(exclude_none=True)
        await self._send("POST", wire.ABORT_REQUEST, json_body=body, idempotent=True)

    # --- health

    async def health(self) -> bool:
        """True when `/health` answers 200; False when not ready or unreachable."""
        return await self._probe(wire.HEALTH)

    async def health_generate(self) -> bool:
        """True when `/health_generate` (a one-token generation) answers 200."""
        return await self._probe(wire.HEALTH_GENERATE)

    async def wait_until_ready(self, deadline_s: float, *, interval_s: float = 0.1) -> None:
        """Poll `/health` until it answers 200; `EngineUnavailable` after `deadline_s` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while True:
            if await self._probe(wire.HEALTH, retries=0):
                return
            if loop.time() >= end:
                raise EngineUnavailable(
                    f"engine not ready after {deadline_s:.1f}s", url=self.base_url + wire.HEALTH
                )
            await asyncio.sleep(interval_s)

    async def post(self, path: str, body: dict[str, Any], *, timeout_s: float | None = None) -> Any:
        """POST `body` to `path`; its JSON answer (an error status raised as for every call)."""
        timeout = _call_timeout(timeout_s)
        return self._json(await self._send("POST", path, json_body=body, request_timeout=timeout))

    # --- transport

    async def _probe(self, path: str, *, retries: int | None = None) -> bool:
        try:
            await self._send("GET", path, retries=retries)
        except EngineError:
            return False
        return True

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        request_timeout: httpx.Timeout | None = None,
        retries: int | None = None,
        idempotent: bool | None = None,
    ) -> httpx.Response:
        """`method path`, its HTTP error raised. `idempotent` (default: a GET): sending it twice
        does what once does (`transport.send`)."""
        url = self.base_url + path
        attempts = 1 + (self._retries if retries is None else retries)
        idempotent = method == "GET" if idempotent is None else idempotent
        timeout = request_timeout or self._timeout
        for attempt in range(attempts):
            try:
                response = await send(
                    self, self._client, method, url, json_body, timeout, idempotent
                )
            except httpx.TransportError as exc:
                retryable = isinstance(exc, CONNECT_ERRORS) or method == "GET"
                if not retryable or attempt == attempts - 1:
                    raise EngineUnavailable(f"{type(exc).__name__}: {exc}", url=url) from exc
                await asyncio.sleep(0.1 * 2**attempt)
                continue
            _raise_for_status(url, response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise EngineServerError(
                f"response is not JSON: {response.text[:200]!r}",
                url=str(response.request.url),
                status_code=response.status_code,
            ) from exc


def _raise_for_status(url: str, response: httpx.Response) -> None:
    """The error of an answer with an HTTP error status (`wire.status_error`), raised."""
    error = wire.status_error(
        response.status_code, response.content, url=url, reason=response.reason_phrase
    )
    if error is not None:
        raise error
