"""The proxy's client: the endpoints that agents, collectors and the weight publisher call.

One `ProxyRolloutClient` per process, created and closed by whoever wires the job (the
orchestrator), over one proxy or several replicas of it. With replicas, every request of one
prompt group (its sessions' turns, finalize, refusal and discard, the OpenAI base URL a
blackbox agent gets, and the group's segment read) goes to the replica that rendezvous hashing
gives the group's id (`dressage.proxy.affinity`); the control calls (pause, continue, the
weight version, the engine set) go to every replica (`_fan_out`): a replica that takes no
connection or does not answer is counted in `unreachable`, logged, and left out, so a publish
proceeds for the others (the groups it held fail anyway and are retried); one that answers an
error fails the call, as a single proxy's error does; no replica answering fails it.

Every HTTP failure becomes a `RolloutError` carrying the proxy's stable error name
(`dressage.proxy.errors`), so the collectors count failures by reason and retry the whole
prompt group; an error name that the proxy's staleness refusals answer
(`dressage.proxy.span_rule.staleness_error_names`) marks it as a staleness failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from dressage.data.codec import record_to_sample
from dressage.data.groups import GroupFailed
from dressage.data.samples import Sample
from dressage.engine.wire import CALL_TIMEOUT_S
from dressage.proxy.affinity import dns_target, parse_replica_urls, replica_for, replica_urls_of
from dressage.proxy.engine_set import EngineSet, merge_engine_sets
from dressage.proxy.span_rule import staleness_error_names

log = logging.getLogger("dressage.proxy.client")

REPLICA_UNREACHABLE = "replica_unreachable"
"""How an engine's result of a fan-out through the replicas starts when its replica did not
answer (`update_weights_from_disk`)."""
REPLICA_REFRESH_S = 5.0
"""Seconds between two resolutions of a `dns+http://` replica source."""

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""`(host, port) -> addresses`: how a `dns+http://HOST:PORT` source is resolved."""


async def resolve_addresses(host: str, port: int) -> Sequence[str]:
    """Every address `host` resolves to (the A/AAAA records of a headless Service)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


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
    long generations in flight cost milliseconds of CPU per request (`docs/benchmarks.md`,
    "Rollout client").

    `base_url`: the proxy's URL, or its replicas' URLs (a sequence, or one comma-separated
    string as `DRESSAGE_PROXY_URL` carries them), or `dns+http://HOST:PORT`: every address of
    HOST (a headless Service of the proxy pods), resolved again every `REPLICA_REFRESH_S`.
    Every session-bound call names the session's group (`instance_id`), which picks the
    replica (`replica_url`); a group keeps the replica it started on until its segments are
    read, so a replica that joins the resolved set (a restarted pod under a new address) takes
    only groups that start after it.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        timeout_s: float = 600.0,
        token: str | None = None,
        resolver: Resolver = resolve_addresses,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._dns = dns_target(base_url) if isinstance(base_url, str) else None
        self.replicas: tuple[str, ...] = () if self._dns else parse_replica_urls(base_url)
        """The proxy replicas' URLs (one for a single proxy; for a `dns+` source, as last
        resolved)."""
        self.base_url = str(base_url).rstrip("/") if self._dns else self.replicas[0]
        self.timeout_s = timeout_s
        self.unreachable: Counter[str] = Counter()
        """Per replica URL, the control calls it did not answer (left out of a fan-out)."""
        self._silent: set[str] = set()
        """The replicas that did not answer their last control call: a continue's shards go
        to the others first (`resume`)."""
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        self._pinned: dict[str, str] = {}
        """Group id -> the replica its sessions live on, from its first call to its segment
        read."""
        self._resolver = resolver
        self._clock = clock
        self._resolved_at: float | None = None

    async def _refresh(self) -> None:
        """Resolve a `dns+` source when it is due; a failed resolution keeps the last answer
        (RolloutError when there is none)."""
        if self._dns is None:
            return
        now = self._clock()
        if self._resolved_at is not None and now - self._resolved_at < REPLICA_REFRESH_S:
            return
        scheme, host, port = self._dns
        try:
            urls = replica_urls_of(scheme, await self._resolver(host, port), port)
        except OSError as exc:
            urls = ()
            log.warning("proxy replicas %s: cannot resolve %s: %s", self.base_url, host, exc)
        self._resolved_at = now
        if urls:
            if urls != self.replicas and self.replicas:
                log.info("proxy replicas now %s", ", ".join(urls))
            self.replicas = urls
        elif not self.replicas:
            raise RolloutError(f"proxy replicas {self.base_url}: {host} resolves to no address")

    def replica_url(self, instance_id: str) -> str:
        """The URL of the replica that holds group `instance_id`'s sessions."""
        if self._dns is None and len(self.replicas) == 1:
            return self.replicas[0]
        url = self._pinned.get(instance_id)
        if url is None:
            if not self.replicas:
                raise RolloutError(f"proxy replicas {self.base_url}: none resolved yet")
            url = self._pinned[instance_id] = replica_for(instance_id, self.replicas)
        return url

    async def _replica(self, instance_id: str) -> str:
        await self._refresh()
        return self.replica_url(instance_id)

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
        base: str | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, bytes]:
        """`method path` on the proxy (replica `base`, default the first): the answer's status
        and body, or a `RolloutError` (its `status` None when no answer came). `timeout_s`:
        this call's bound instead of the client's."""
        limit = None if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s, connect=10.0)
        try:
            async with self._session(control).request(
                method,
                (base or self.replicas[0]) + path,
                json=body,
                params=params,
                headers=headers,
                timeout=limit,
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
        base: str | None = None,
    ) -> Any:
        status, data = await self._request(
            "POST", path, body=body, headers=headers, control=control, base=base
        )
        return self._answer(f"POST {path}", status, data)

    async def _get(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        control: bool = False,
        base: str | None = None,
    ) -> Any:
        status, data = await self._request("GET", path, params=params, control=control, base=base)
        return self._answer(f"GET {path}", status, data)

    async def _fan_out(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        replicas: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """`method path` on every replica (of `replicas`, default all) at once, on the control
        session: the answers of those that answered, by URL.

        A replica that takes no connection or does not answer in time is counted in
        `unreachable`, logged and left out: its sessions are lost with it (their groups fail
        and are retried), and the others must not wait for it. A replica that answers an error
        raises that error once every replica was asked, so none is skipped because another
        refused (a continue must reach all). No replica answering raises the first failure."""
        if replicas is None:
            await self._refresh()
        targets = list(self.replicas if replicas is None else replicas)

        async def call(url: str) -> Any:
            if method == "GET":
                return await self._get(path, control=True, base=url)
            return await self._post(path, body or {}, control=True, base=url)

        results = await asyncio.gather(*(call(url) for url in targets), return_exceptions=True)
        answers: dict[str, Any] = {}
        refused: RolloutError | None = None
        lost: list[RolloutError] = []
        for url, result in zip(targets, results, strict=True):
            if isinstance(result, RolloutError) and result.status is None:
                self.unreachable[url] += 1
                self._silent.add(url)
                log.warning("proxy replica %s did not answer %s %s: %s", url, method, path, result)
                lost.append(result)
            elif isinstance(result, BaseException):
                if not isinstance(result, RolloutError):
                    raise result  # a cancellation, or a bug
                refused = refused or RolloutError(
                    f"proxy replica {url}: {result}", status=result.status, code=result.code
                )
            else:
                self._silent.discard(url)
                answers[url] = result
        if refused is not None:
            raise refused
        if not answers:
            raise lost[0]
        return answers

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
            "/generate",
            body,
            headers={"X-Session-Id": session_id, "X-Instance-Id": instance_id},
            base=await self._replica(instance_id),
        )
        return [int(t) for t in data["output_ids"]]

    async def create_session(self, session_id: str, instance_id: str) -> None:
        """Open a session ahead of an agent that cannot send `X-Instance-Id` itself."""
        await self._post(
            "/sessions",
            {"session_id": session_id, "instance_id": instance_id},
            base=await self._replica(instance_id),
        )

    async def refusal(self, session_id: str, *, instance_id: str) -> str | None:
        """The stable error name the proxy stopped `session_id` (of group `instance_id`) with,
        if it did."""
        status, data = await self._request(
            "GET", f"/sessions/{session_id}", base=await self._replica(instance_id)
        )
        if status != 200:
            return None
        refusal = json.loads(data).get("refusal")
        if not isinstance(refusal, dict):
            return None
        code = refusal.get("code") or refusal.get("type")
        return str(code) if code else None

    def session_base_url(self, session_id: str, *, instance_id: str) -> str:
        """An OpenAI base URL that carries the session in its path, for unmodified agents: on
        the replica that holds the session's group `instance_id`."""
        return f"{self.replica_url(instance_id)}/s/{session_id}/v1"

    async def finalize(self, session_id: str, reward: float | None, *, instance_id: str) -> None:
        await self._post(
            f"/sessions/{session_id}/finalize",
            {"reward": reward},
            base=await self._replica(instance_id),
        )

    async def discard(self, session_id: str, *, instance_id: str) -> None:
        """Forget a session (best effort: a failed trajectory's session may not exist)."""
        try:
            await self._request(
                "DELETE", f"/sessions/{session_id}", base=await self._replica(instance_id)
            )
        except RolloutError:
            return

    async def segments(self, instance_id: str) -> list[Sample]:
        """Drain the finished segment records of `instance_id` as training samples: the
        group's last call, which ends its hold on its replica."""
        try:
            data = await self._get(
                "/segments",
                params={"instance_id": instance_id, "drain": "true"},
                base=await self._replica(instance_id),
            )
        finally:
            self._pinned.pop(instance_id, None)
        return [record_to_sample(r) for r in data["segments"]]

    async def pause(self, mode: str = "in_place") -> None:
        """Pause generation on every replica. With several, every replica's gate is closed
        first (`"engines": false`) and only then are the engines paused, each replica pausing
        one shard of them (`_sharded`): an engine paused by one replica aborts the generations
        of all, and a replica whose gate were still open would take such an abort for a
        client's and end the turn short instead of resuming it. The shards keep a publish's
        proxy work at one request per engine whatever the replicas, spread over them."""
        if len(self.replicas) > 1:
            gated = await self._fan_out(
                "POST", "/pause_generation", {"mode": mode, "engines": False}
            )
            await self._sharded("/pause_generation", {"mode": mode}, list(gated))
            return
        await self._fan_out("POST", "/pause_generation", {"mode": mode})

    async def resume(self, weight_version: str | None = None, serving: Sequence[str] = ()) -> None:
        """Continue generation on every replica; with `weight_version`, they route only to
        engines that serve it from now on (`serving`: engines seen to load it, which the
        replicas do not read again). With several, each replica continues one shard of the
        engines with its gate left closed (`"gate": false`), and only then does every replica
        take the version and open its gate (`"engines": false`): no replica routes a new turn
        to an engine another replica has not continued yet. The shards go to the replicas that
        answered their last control call (a replica down would cost each shard step its
        timeout). Every gate is opened even when a shard failed; that shard's error is raised
        after."""
        body: dict[str, Any] = {} if weight_version is None else {"weight_version": weight_version}
        if weight_version is not None and serving:
            body["serving"] = list(serving)
        await self._refresh()
        if len(self.replicas) < 2:
            await self._fan_out("POST", "/continue_generation", body)
            return
        replicas = list(self.replicas)
        answering = [url for url in replicas if url not in self._silent] or replicas
        failed: RolloutError | None = None
        try:
            await self._sharded("/continue_generation", {"gate": False}, answering)
        except RolloutError as exc:
            failed = exc
        try:
            await self._fan_out(
                "POST", "/continue_generation", {**body, "engines": False}, replicas=replicas
            )
        except RolloutError as exc:
            failed = failed or exc
        if failed is not None:
            raise failed

    async def _sharded(self, path: str, body: Mapping[str, Any], replicas: Sequence[str]) -> None:
        """`POST path` with `body` to each of `replicas` for one shard of the engines each
        (`"shard": [i, n]`, `dressage.proxy.affinity.shard_of`); the shard of a replica that
        does not answer goes to the others in turn (every replica holds the whole engine set).
        The first error a replica answered is raised once every shard was sent; RolloutError
        when no replica answered a shard."""
        count = len(replicas)

        async def one(index: int) -> None:
            order = [*replicas[index:], *replicas[:index]]
            await self._through_one(path, {**body, "shard": [index, count]}, order)

        results = await asyncio.gather(
            *(one(index) for index in range(count)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _through_one(
        self, path: str, body: Mapping[str, Any], replicas: Sequence[str]
    ) -> dict[str, Any]:
        """`POST path` on the first of `replicas` that answers (its answer, by URL); one that
        refuses raises, one that does not answer passes it to the next."""
        lost: RolloutError | None = None
        for url in replicas:
            try:
                return await self._fan_out("POST", path, body, replicas=[url])
            except RolloutError as exc:
                if exc.status is not None:
                    raise
                lost = lost or exc
        raise lost or RolloutError("no proxy replica to send " + path)

    async def update_weights_from_disk(
        self,
        engine_urls: Sequence[str],
        model_path: str,
        weight_version: str,
        *,
        held: bool = True,
        timeout_s: float | None = None,
    ) -> dict[str, str | None]:
        """Load the checkpoint `model_path` as `weight_version` on `engine_urls`, from the
        proxy (`POST /dressage/weights/update_from_disk`): with several replicas each updates
        an equal share, all at once. Each engine's result by URL: None when it took the
        version, else why not; the share of a replica that did not answer fails with
        `REPLICA_UNREACHABLE` (the engines may still be reached another way).
        `held`: requests are held by an `in_place` pause. `timeout_s`: one engine's load
        (the proxy's default when None). A replica refusing the request (a proxy without the
        route answers 404 `not_found`) raises its `RolloutError`."""
        if not engine_urls:
            return {}
        await self._refresh()
        replicas = list(self.replicas)
        if not replicas:
            raise RolloutError(f"proxy replicas {self.base_url}: none resolved yet")
        shares = {url: list(engine_urls[i :: len(replicas)]) for i, url in enumerate(replicas)}
        shares = {url: share for url, share in shares.items() if share}
        # The engines' load plus the proxy's own work; the proxy bounds each load.
        limit = (timeout_s if timeout_s is not None else CALL_TIMEOUT_S) + 60.0

        async def one(replica: str, share: list[str]) -> dict[str, str | None]:
            body: dict[str, Any] = {
                "model_path": model_path,
                "weight_version": weight_version,
                "held": held,
                "engines": share,
            }
            if timeout_s is not None:
                body["timeout_s"] = timeout_s
            path = "/dressage/weights/update_from_disk"
            try:
                status, data = await self._request(
                    "POST", path, body=body, control=True, base=replica, timeout_s=limit
                )
            except RolloutError as exc:  # no answer: its share did not take the version
                self.unreachable[replica] += 1
                log.warning("proxy replica %s did not answer %s: %s", replica, path, exc)
                return dict.fromkeys(share, f"{REPLICA_UNREACHABLE}: {replica}: {exc}")
            answer = self._answer(f"POST {path}", status, data)
            results: dict[str, str | None] = answer["engines"]
            return results

        answers = await asyncio.gather(*(one(r, share) for r, share in shares.items()))
        merged: dict[str, str | None] = {}
        for answer in answers:
            merged.update(answer)
        return {url: merged.get(url, "not in the proxy's answer") for url in engine_urls}

    async def engines(self) -> EngineSet:
        """The engines behind the proxy replicas and the weight version they route to
        (`merge_engine_sets`)."""
        answers = await self._fan_out("GET", "/dressage/engines")
        return _merged(answers)

    async def set_weight_version(self, weight_version: str) -> EngineSet:
        """Tell every replica the job's current weight version (each reads every engine's
        version and routes only to those serving it); answers the engine set after it."""
        answers = await self._fan_out(
            "POST", "/dressage/weight_version", {"weight_version": weight_version}
        )
        return _merged(answers)

    async def replica_metrics(self, timeout_s: float) -> dict[str, str | None]:
        """Every replica's `/metrics` (Prometheus text) by URL, None for one that did not
        answer within `timeout_s` or answered an error: one GET per replica, all at once, on
        the control session. Never raises for a replica's failure: a reader of counters reads
        them again later (the token ledger's proxy side, `dressage.rollout.proxy_ledger`)."""
        try:
            await self._refresh()
        except RolloutError:
            return {}
        limit = aiohttp.ClientTimeout(total=timeout_s)

        async def read(url: str) -> str | None:
            try:
                async with self._session(True).get(url + "/metrics", timeout=limit) as answer:
                    return await answer.text() if answer.status == 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.debug("proxy replica %s: /metrics not read: %s", url, _failure(exc))
                return None

        urls = list(self.replicas)
        texts = await asyncio.gather(*(read(url) for url in urls))
        return dict(zip(urls, texts, strict=True))


def _merged(answers: Mapping[str, Any]) -> EngineSet:
    """The replicas' engine sets (`GET /dressage/engines` answers by URL) as one."""
    try:
        return merge_engine_sets([EngineSet.from_json(a) for a in answers.values()])
    except ValueError as exc:
        raise RolloutError(str(exc)) from None


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
