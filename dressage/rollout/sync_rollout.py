"""Synchronous rollout: generate one trainer batch of GRPO groups, then stop until asked again.

Every trajectory goes through the rollout proxy, never to an engine directly: the collector
opens one proxy session per trajectory (`X-Session-Id`, with `X-Instance-Id` naming its
group), generates the answer with `POST /generate`, scores it with the task's reward,
finalizes the session with that reward, and reads the group's training samples back from
`GET /segments?instance_id=...` (`record_to_sample`). The proxy records each token's weight
version, so the samples carry the same version metadata as in the async modes.

A group whose rollout fails (any trajectory's HTTP error, including the proxy's 502
`partial_rollout_staleness_exceeded`) is retried up to `max_retries` times with fresh sessions,
then dropped with reason `retries_exhausted`, and the next prompt takes its place. The data
position (`next_prompt`) is the collector's whole state, so a checkpoint resumes the prompt
stream exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import httpx

from dressage.proxy.records import record_to_sample
from dressage.rollout.artifacts.samples import Sample
from dressage.rollout.groups import Group, GroupFailed, GroupRollout, TrainBatch

DROP_RETRIES_EXHAUSTED: Final = "retries_exhausted"
STALENESS_REFUSAL: Final = "partial_rollout_staleness_exceeded"


class PromptSource(Protocol):
    """What the collector needs from a task plus its tokenizer."""

    def prompt_ids(self, index: int) -> list[int]:
        """Token ids of prompt `index`."""
        ...

    def reward(self, index: int, output_ids: Sequence[int]) -> float:
        """Reward of the generated `output_ids` for prompt `index`."""
        ...


class RolloutError(GroupFailed):
    """One trajectory's rollout failed; `code` is the proxy's stable error name if any.

    It is a `GroupFailed`, so every collector retries the whole prompt group; the proxy's
    `partial_rollout_staleness_exceeded` marks it as a staleness failure.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        # The counting label: the proxy's error code, else the start of the message.
        reason = code or message.split(":", 2)[-1].strip()[:60] or "rollout_error"
        super().__init__(reason, message, staleness=code == STALENESS_REFUSAL)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class SamplingSettings:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


class ProxyRolloutClient:
    """The proxy endpoints a whitebox agent and the collector use.

    Two HTTP clients: one for trajectories and one for the control plane (pause/continue). A
    pause parks every in-flight generation at the proxy until continue; if continue had to queue
    for a connection behind those parked requests, it would never be sent. The trajectory pool
    keeps httpx's default size on purpose: httpcore scans every pooled connection each time a
    request finishes, so a pool of hundreds of connections costs quadratic CPU on the event
    loop; requests beyond the pool wait in the client instead.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, token: str | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers
        )
        self._control = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers
        )

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._control.aclose()

    async def _post(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        control: bool = False,
    ) -> Any:
        client = self._control if control else self._client
        try:
            response = await client.post(self.base_url + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise RolloutError(f"POST {path}: {type(exc).__name__}: {exc}") from exc
        return self._answer(f"POST {path}", response)

    @staticmethod
    def _answer(what: str, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            code: str | None = None
            message = response.text[:300]
            try:
                error = response.json().get("error", {})
                code = error.get("code") or error.get("type")
                message = error.get("message", message)
            except (ValueError, AttributeError):
                pass
            raise RolloutError(
                f"{what}: HTTP {response.status_code} {code or ''}: {message}",
                status=response.status_code,
                code=code,
            )
        return response.json()

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
        try:
            response = await self._client.get(f"{self.base_url}/sessions/{session_id}")
        except httpx.HTTPError as exc:
            raise RolloutError(f"GET /sessions: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            return None
        refusal = response.json().get("refusal")
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
        with contextlib.suppress(httpx.HTTPError):
            await self._client.delete(f"{self.base_url}/sessions/{session_id}")

    async def segments(self, instance_id: str) -> list[Sample]:
        """Drain the finished segment records of `instance_id` as training samples."""
        try:
            response = await self._client.get(
                self.base_url + "/segments", params={"instance_id": instance_id, "drain": "true"}
            )
        except httpx.HTTPError as exc:
            raise RolloutError(f"GET /segments: {type(exc).__name__}: {exc}") from exc
        data = self._answer("GET /segments", response)
        return [record_to_sample(r) for r in data["segments"]]

    async def pause(self, mode: str = "in_place") -> None:
        await self._post("/pause_generation", {"mode": mode}, control=True)

    async def resume(self) -> None:
        await self._post("/continue_generation", {}, control=True)


@dataclass
class _Outcome:
    group: Group | None
    failures: int = 0
    staleness_failures: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


class SyncCollector:
    """Implements `dressage.rollout.groups.Collector` for `rollout.mode: sync`."""

    def __init__(
        self,
        *,
        source: PromptSource,
        client: ProxyRolloutClient,
        group_size: int,
        batch_size: int,
        sampling: SamplingSettings,
        max_retries: int = 3,
        concurrency: int = 32,
        seed: int = 0,
        run_tag: str = "run",
        retry_backoff_s: float = 0.5,
        rollout: GroupRollout | None = None,
    ) -> None:
        if group_size < 1 or batch_size < 1 or concurrency < 1 or max_retries < 0:
            raise ValueError("group_size, batch_size and concurrency must be >= 1, retries >= 0")
        self.source = source
        self.client = client
        self.group_size = group_size
        self.batch_size = batch_size
        self.sampling = sampling
        self.max_retries = max_retries
        self.seed = seed
        self.run_tag = run_tag
        self.retry_backoff_s = retry_backoff_s
        self.next_prompt = 0
        self.version: str | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self.rollout: GroupRollout = rollout or SingleTurnRollout(
            source=source,
            client=client,
            group_size=group_size,
            sampling=sampling,
            seed=seed,
            run_tag=run_tag,
        )

    # --- Collector protocol ------------------------------------------------------------

    async def next_batch(self) -> TrainBatch:
        """Roll out `batch_size` complete groups (dropped groups are replaced by new prompts)."""
        groups: list[Group] = []
        drops: Counter[str] = Counter()
        failed = retries = stale = 0
        reasons: Counter[str] = Counter()
        # Every prompt gets 1 + max_retries attempts; a batch that drops this many prompts in
        # a row means the rollout path is broken, not unlucky.
        max_dropped = 4 * self.batch_size
        while len(groups) < self.batch_size:
            wanted = self.batch_size - len(groups)
            indices = list(range(self.next_prompt, self.next_prompt + wanted))
            self.next_prompt += wanted
            outcomes = await asyncio.gather(*(self._group_with_retries(i) for i in indices))
            for outcome in outcomes:
                failed += outcome.failures
                retries += min(outcome.failures, self.max_retries)
                stale += outcome.staleness_failures
                reasons.update(outcome.reasons)
                if outcome.group is None:
                    drops[DROP_RETRIES_EXHAUSTED] += 1
                else:
                    groups.append(outcome.group)
            if sum(drops.values()) > max_dropped:
                raise RolloutError(
                    f"dropped {sum(drops.values())} prompt groups while collecting one batch "
                    f"(max_retries={self.max_retries}); is the proxy or an engine failing?"
                )
        return TrainBatch(
            groups=tuple(groups),
            dropped_groups=dict(drops),
            failed_groups=failed,
            retries=retries,
            staleness_failures=stale,
            failure_reasons=dict(reasons),
        )

    def on_weights_published(self, version: str) -> None:
        self.version = version

    def state_dict(self) -> dict[str, Any]:
        return {"next_prompt": self.next_prompt}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        position = state.get("next_prompt", 0)
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"collector state next_prompt must be an int >= 0, got {position!r}")
        self.next_prompt = position

    async def aclose(self) -> None:
        await self.client.aclose()

    # --- one group ------------------------------------------------------------------------

    async def _group_with_retries(self, index: int) -> _Outcome:
        outcome = _Outcome(group=None)
        for attempt in range(self.max_retries + 1):
            if attempt:
                # A brief outage (an engine marked unhealthy, a restart) should not burn every
                # retry at once: back off 0.5 s, 1 s, 2 s ... with jitter.
                delay = self.retry_backoff_s * 2 ** (attempt - 1)
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                async with self._slots:  # spec.rollout.concurrency: groups in flight
                    outcome.group = await self.rollout(index, attempt)
                return outcome
            except RolloutError as exc:
                outcome.failures += 1
                outcome.reasons[exc.reason] += 1
                if exc.code == STALENESS_REFUSAL:
                    outcome.staleness_failures += 1
        return outcome


TrajectoryFn = Callable[[str, int], Awaitable[None]]
"""Runs one trajectory in proxy session `session_id` (member `i` of its group) and finalizes
the session with its reward."""


async def collect_group(
    client: ProxyRolloutClient, group_id: str, group_size: int, trajectory: TrajectoryFn
) -> Group:
    """Run `group_size` trajectories of one prompt concurrently and read back their samples.

    Each trajectory gets its own proxy session (`<group_id>-t<i>`) in instance `group_id`. If
    any trajectory fails, the group is incomplete: its sessions are discarded, what finished is
    drained, and the first error is raised, so the collector retries the whole prompt group.
    """
    sessions = [f"{group_id}-t{i}" for i in range(group_size)]
    results = await asyncio.gather(
        *(trajectory(sid, i) for i, sid in enumerate(sessions)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await asyncio.gather(*(client.discard(s) for s in sessions))
        await client.segments(group_id)
        first = next((e for e in errors if isinstance(e, RolloutError)), errors[0])
        if isinstance(first, asyncio.CancelledError):
            raise first
        if not isinstance(first, RolloutError):
            raise RolloutError(f"group {group_id}: {type(first).__name__}: {first}") from first
        raise first
    samples = await client.segments(group_id)
    if len({s.parent_traj_id for s in samples}) != group_size:
        raise RolloutError(
            f"group {group_id}: proxy returned segments of "
            f"{len({s.parent_traj_id for s in samples})} trajectories, expected {group_size}"
        )
    return Group(group_id=group_id, samples=tuple(samples))


def group_id_of(run_tag: str, index: int, attempt: int) -> str:
    """The proxy instance id of attempt `attempt` at prompt `index` (its GRPO group)."""
    return f"{run_tag}-p{index}-a{attempt}"


def sample_seed(seed: int, index: int, attempt: int, member: int) -> int:
    """A sampling seed distinct per sample and reproducible across restarts."""
    return (seed * 1_000_003 + index * 1_009 + attempt * 101 + member) % (2**31 - 1)


class SingleTurnRollout:
    """One prompt group of a single-turn task: `(prompt index, attempt) -> Group`.

    Every trajectory generates one answer through the proxy's `/generate`, is scored by the
    task's reward, and is finalized with it; the group's samples are read back from the proxy.
    Used by every collector (it satisfies `dressage.rollout.groups.GroupRollout`).
    """

    def __init__(
        self,
        *,
        source: PromptSource,
        client: ProxyRolloutClient,
        group_size: int,
        sampling: SamplingSettings,
        seed: int = 0,
        run_tag: str = "run",
    ) -> None:
        self.source = source
        self.client = client
        self.group_size = group_size
        self.sampling = sampling
        self.seed = seed
        self.run_tag = run_tag

    async def __call__(self, index: int, attempt: int) -> Group:
        group_id = group_id_of(self.run_tag, index, attempt)
        prompt_ids = self.source.prompt_ids(index)

        async def trajectory(session_id: str, member: int) -> None:
            output = await self.client.generate(
                prompt_ids,
                self.sampling,
                session_id=session_id,
                instance_id=group_id,
                seed=sample_seed(self.seed, index, attempt, member),
            )
            await self.client.finalize(session_id, self.source.reward(index, output))

        return await collect_group(self.client, group_id, self.group_size, trajectory)
