"""The proxy's client: the endpoints that agents, collectors and the weight publisher call.

One `ProxyRolloutClient` per process, created and closed by whoever wires the job (the
orchestrator). Every HTTP failure becomes a `RolloutError` carrying the proxy's stable error
name (`dressage.proxy.errors`), so the collectors count failures by reason and retry the whole
prompt group; an error name that the proxy's staleness refusals answer
(`dressage.proxy.staleness.staleness_error_names`) marks it as a staleness failure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from dressage.data.codec import record_to_sample
from dressage.data.groups import GroupFailed
from dressage.data.samples import Sample
from dressage.proxy.staleness import staleness_error_names


class RolloutError(GroupFailed):
    """One trajectory's rollout failed; `code` is the proxy's stable error name if any.

    It is a `GroupFailed`, so every collector retries the whole prompt group; a staleness
    refusal's name (`partial_rollout_staleness_exceeded`, `version_changed_without_partial_
    rollout`) marks it as a staleness failure.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        # The counting label: the proxy's error code, else the last non-empty part of the
        # message ("POST /generate: ReadTimeout: " counts as `ReadTimeout`).
        parts = [part.strip() for part in message.split(":", 2)[1:]]
        reason = code or next((p[:60] for p in reversed(parts) if p), "rollout_error")
        super().__init__(reason, message, staleness=code in staleness_error_names())
        self.status = status
        self.code = code


@dataclass(frozen=True)
class SamplingSettings:
    """The job's sampling settings for one generation (`spec.rollout`)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    """Generate exactly `max_new_tokens` tokens, past end-of-sequence (SGLang's
    `ignore_eos`): a task that fixes response lengths asks for it."""


@dataclass(frozen=True)
class EngineView:
    """One engine as the proxy sees it (`GET /dressage/engines`)."""

    url: str
    healthy: bool
    routable: bool
    weight_version: str | None


@dataclass(frozen=True)
class EngineSet:
    """The proxy's engines and the weight version it routes to (None: not told one yet)."""

    weight_version: str | None
    engines: tuple[EngineView, ...]

    @classmethod
    def from_json(cls, data: Any) -> EngineSet:
        try:
            engines = tuple(
                EngineView(
                    url=str(e["url"]),
                    healthy=bool(e["healthy"]),
                    routable=bool(e["routable"]),
                    weight_version=_label(e["weight_version"]),
                )
                for e in data["engines"]
            )
            version = data["weight_version"]
        except (KeyError, TypeError) as exc:
            raise RolloutError(f"the proxy's engine set is malformed: {exc!r}") from None
        return cls(_label(version), engines)


def _label(value: Any) -> str | None:
    return None if value is None else str(value)


class ProxyRolloutClient:
    """The proxy endpoints a whitebox agent and the collector use.

    Two HTTP sessions (aiohttp, created on first use in the running event loop): one for
    trajectories and one for the control plane (pause/continue). A pause parks every in-flight
    generation at the proxy until continue; continue must never wait behind them. Neither
    session bounds its connections: every trajectory in flight holds one keep-alive connection
    while its generation runs (seconds, for a long one), and a request that had to wait for a
    connection would be a request the collector thinks is generating. aiohttp hands out
    connections in constant time; httpx's pool, which this client used before, scans every
    connection and every waiting request whenever a request starts or ends, so hundreds of
    long generations in flight cost milliseconds of CPU per request (see the README's
    long-tail benchmark).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, token: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()

    def _session(self, control: bool) -> aiohttp.ClientSession:
        session = self._sessions.get(control)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=10.0),
                connector=aiohttp.TCPConnector(limit=0),
            )
            self._sessions[control] = session
        return session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        control: bool = False,
    ) -> tuple[int, bytes]:
        """`method path` on the proxy: the answer's status and body, or a `RolloutError`."""
        try:
            async with self._session(control).request(
                method, self.base_url + path, json=body, params=params, headers=headers
            ) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RolloutError(f"{method} {path}: {_failure(exc)}") from exc

    async def _post(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        control: bool = False,
    ) -> Any:
        status, data = await self._request(
            "POST", path, body=body, headers=headers, control=control
        )
        return self._answer(f"POST {path}", status, data)

    async def _get(
        self, path: str, *, params: Mapping[str, str] | None = None, control: bool = False
    ) -> Any:
        status, data = await self._request("GET", path, params=params, control=control)
        return self._answer(f"GET {path}", status, data)

    @staticmethod
    def _answer(what: str, status: int, data: bytes) -> Any:
        if status >= 400:
            code: str | None = None
            message = data[:300].decode(errors="replace")
            try:
                error = json.loads(data).get("error", {})
                code = error.get("code") or error.get("type")
                message = error.get("message", message)
                if error.get("detail"):  # e.g. each engine's answer to a pause
                    message += f" {json.dumps(error['detail'])[:600]}"
            except (ValueError, AttributeError):
                pass
            raise RolloutError(
                f"{what}: HTTP {status} {code or ''}: {message}", status=status, code=code
            )
        try:
            return json.loads(data)
        except ValueError:
            raise RolloutError(f"{what}: the proxy's answer is not JSON: {data[:200]!r}") from None

    async def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingSettings,
        *,
        session_id: str,
        instance_id: str,
        seed: int | None = None,
    ) -> list[int]:
        """Generate one answer in session `session_id`; returns the output token ids."""
        params: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.ignore_eos:
            params["ignore_eos"] = True
        if seed is not None:
            params["sampling_seed"] = seed
        body = {"input_ids": list(prompt_ids), "sampling_params": params, "return_logprob": True}
        data = await self._post(
            "/generate", body, headers={"X-Session-Id": session_id, "X-Instance-Id": instance_id}
        )
        return [int(t) for t in data["output_ids"]]

    async def create_session(self, session_id: str, instance_id: str) -> None:
        """Open a session ahead of an agent that cannot send `X-Instance-Id` itself."""
        await self._post("/sessions", {"session_id": session_id, "instance_id": instance_id})

    async def refusal(self, session_id: str) -> str | None:
        """The stable error name the proxy stopped `session_id` with, if it did."""
        status, data = await self._request("GET", f"/sessions/{session_id}")
        if status != 200:
            return None
        refusal = json.loads(data).get("refusal")
        if not isinstance(refusal, dict):
            return None
        code = refusal.get("code") or refusal.get("type")
        return str(code) if code else None

    def session_base_url(self, session_id: str) -> str:
        """An OpenAI base URL that carries the session in its path, for unmodified agents."""
        return f"{self.base_url}/s/{session_id}/v1"

    async def finalize(self, session_id: str, reward: float | None) -> None:
        await self._post(f"/sessions/{session_id}/finalize", {"reward": reward})

    async def discard(self, session_id: str) -> None:
        """Forget a session (best effort: a failed trajectory's session may not exist)."""
        try:
            await self._request("DELETE", f"/sessions/{session_id}")
        except RolloutError:
            return

    async def segments(self, instance_id: str) -> list[Sample]:
        """Drain the finished segment records of `instance_id` as training samples."""
        data = await self._get("/segments", params={"instance_id": instance_id, "drain": "true"})
        return [record_to_sample(r) for r in data["segments"]]

    async def pause(self, mode: str = "in_place") -> None:
        await self._post("/pause_generation", {"mode": mode}, control=True)

    async def resume(self, weight_version: str | None = None) -> None:
        """Continue generation; with `weight_version`, the proxy routes only to engines that
        serve it from now on."""
        body = {} if weight_version is None else {"weight_version": weight_version}
        await self._post("/continue_generation", body, control=True)

    async def engines(self) -> EngineSet:
        """The engines behind the proxy and the weight version it routes to."""
        return EngineSet.from_json(await self._get("/dressage/engines", control=True))

    async def set_weight_version(self, weight_version: str) -> EngineSet:
        """Tell the proxy the job's current weight version (it reads every engine's version
        and routes only to those serving it); answers the engine set after the change."""
        data = await self._post(
            "/dressage/weight_version", {"weight_version": weight_version}, control=True
        )
        return EngineSet.from_json(data)


def _failure(exc: BaseException) -> str:
    """`Name: detail` of a failed request, stable enough to count failures by (no ports)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        errno = exc.os_error.errno
        return f"ConnectError: {os.strerror(errno).lower() if errno else 'cannot connect'}"
    if isinstance(exc, TimeoutError):
        return "Timeout: "
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "ServerDisconnected: "
    return f"{type(exc).__name__}: {str(exc)[:200]}"
