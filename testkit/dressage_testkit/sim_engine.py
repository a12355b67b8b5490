"""A simulated SGLang engine: the HTTP API Dressage's proxy and publishers call, with no model.

What is simulated is the engine's arithmetic, nothing of its control plane: a generation takes
`token_latency_s` per output token and a length drawn from `lengths`, a weight load takes
`load_time_s` (disk) or `transfer_time_s` per bucket (the distributed path), and every answer has
the shape the release it plays gives (`dressage.engine.embedded.release_profiles`: its routes,
its `meta_info` keys, its abort shapes, its weight-update sessions and version routes; the
`/metrics` names and labels of `dressage.metrics.sglang`). Those tables are the ones the
contract tier checks against each release's own source; this module reads them and restates
none (`tests/contract/test_sim_engine.py` holds the simulation to them).

Per-token weight versions are honest: a generation's tokens are produced over time, and the
ones produced after a weight update carry the new label (`meta_info.weight_versions`, runs of
`{version, start, end}`, on a release that has them; `weight_version` is the last token's there
and the HTTP side's label on an older release), exactly as the embedded engine reports them.
Pauses follow the release: `in_place` holds generations where they are, `abort` (and every
pause on 0.5.2) ends them with the release's abort answer.

Cheap by construction, so a thousand run in one process on two cores: a generation is one
timer per state change (no per-token wake-up), and every route answers from plain fields.
`SimEngine.handle(method, path, body)` is transport-free; `dressage_testkit.sim_fleet` serves
many engines on loopback ports from one event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from dressage.engine.embedded.release_profiles import (
    DEFAULT_RELEASE,
    SESSION_NOT_OPEN_MESSAGE,
    SESSION_OPEN_MESSAGE,
    SESSION_REQUIRED_MESSAGE,
    ReleaseProfile,
    profile_for,
)
from dressage.metrics import sglang as sglang_metrics

FLUSHED_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
"""SGLang's `/flush_cache` text (both releases; the embedded engine's `FLUSHED_TEXT`)."""

NAME_TAKEN = (
    "The specified group name has already been created, please use a different group name"
)
"""`torch.distributed`'s refusal of a group name the process holds (as the embedded engine)."""

Lengths = Callable[[random.Random], int]


def uniform_lengths(low: int, high: int) -> Lengths:
    """Output lengths drawn uniformly from `low..high` (both included)."""
    return lambda rng: rng.randint(low, high)


def long_tail_lengths(mean: int, cap: int) -> Lengths:
    """Output lengths drawn from an exponential of mean `mean`, at least 1 and at most `cap`:
    the long tail of agent rollouts."""
    return lambda rng: max(1, min(cap, int(rng.expovariate(1.0 / mean))))


@dataclasses.dataclass
class SimSettings:
    """What the simulated engines take time for (seconds)."""

    release: str = DEFAULT_RELEASE
    token_latency_s: float = 0.001
    """Per output token of one generation (generations of an engine do not slow each other)."""
    lengths: Lengths = dataclasses.field(default_factory=lambda: uniform_lengths(8, 32))
    """The output length of a generation, before `max_new_tokens` caps it."""
    load_time_s: float = 0.0
    """One `/update_weights_from_disk`."""
    transfer_time_s: float = 0.0
    """One bucket of `/update_weights_from_distributed` (the tensor transfer itself)."""
    weight_version: str = "0"
    seed: int = 0
    step_tokens: int | None = None
    """Tokens a generation produces per timer (None: one timer to its end, or to the next state
    change); a test that must act between tokens sets a few and waits `SimEngine.progressed`."""


@dataclasses.dataclass
class Answer:
    """What an engine route answers: a status and a JSON body, or raw text (`/metrics`)."""

    status: int
    body: Any = None
    text: str | None = None


@dataclasses.dataclass
class _Generation:
    rid: str
    target: int
    prompt_tokens: int
    return_logprob: bool
    created: float
    produced: int = 0
    spans: list[list[Any]] = dataclasses.field(default_factory=list)
    """`[version, tokens]` runs, in order."""
    admitted: bool = False
    aborted: bool = False


class SimEngine:
    """One simulated engine's state and routes (one event loop; no threads)."""

    def __init__(self, index: int, settings: SimSettings) -> None:
        self.index = index
        self.settings = settings
        self.profile: ReleaseProfile = profile_for(settings.release)
        self.label = settings.weight_version
        self.rng = random.Random(settings.seed * 1_000_003 + index)
        self.paused = False
        self.pause_mode = "abort"
        self.alive = True
        self.groups: set[str] = set()
        self.session_open = False
        self.running: dict[str, _Generation] = {}
        self.requests = 0
        self.calls: Counter[str] = Counter()
        """Requests per route path, as they arrived (served or not)."""
        self.finished = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.loads = 0
        self.load_seconds = 0.0
        self._wake: asyncio.Future[None] | None = None
        self._progress: asyncio.Future[None] | None = None

    # --- state changes wake every generation of the engine once

    def _changed(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _wake_future(self) -> asyncio.Future[None]:
        if self._wake is None:
            self._wake = asyncio.get_running_loop().create_future()
        return self._wake

    async def progressed(self) -> None:
        """Wait until a generation of this engine is admitted or counts tokens it produced."""
        if self._progress is None:
            self._progress = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._progress)

    def _progressed(self) -> None:
        progress, self._progress = self._progress, None
        if progress is not None and not progress.done():
            progress.set_result(None)

    def kill(self) -> None:
        """The engine dies: every generation ends without an answer (the transport drops it)."""
        self.alive = False
        self._changed()

    # --- routes

    async def handle(self, method: str, path: str, body: dict[str, Any]) -> Answer:
        """The answer of `method path` with JSON `body` ({} when none), as the release gives
        it; 404 for a route the release does not serve (its deprecated aliases answer)."""
        self.calls[path] += 1
        if path == "/metrics" and method == "GET":
            return Answer(200, text=self.metrics())
        if not self.profile.serves(method, path):
            return Answer(404, {"detail": "Not Found"})
        route = _ROUTES.get(path)
        if route is None:  # a served route Dressage never calls: answer it empty
            return Answer(200, {})
        return await route(self, body)

    async def generate(self, body: dict[str, Any]) -> Answer:
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            return Answer(400, {"error": {"message": "sampling_params: not an object"}})
        prompt = body.get("input_ids")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(body.get("text", "")))
        target = self.settings.lengths(self.rng)
        cap = params.get("max_new_tokens")
        if isinstance(cap, int) and cap >= 0:
            target = min(target, cap)
        loop = asyncio.get_running_loop()
        gen = _Generation(
            rid=str(body.get("rid") or uuid.uuid4().hex),
            target=target,
            prompt_tokens=prompt_tokens,
            return_logprob=bool(body.get("return_logprob")),
            created=loop.time(),
        )
        self.requests += 1
        self.running[gen.rid] = gen
        try:
            while self.paused and not gen.aborted and self.alive:
                await self._wake_future()
            gen.admitted = not gen.aborted
            self._progressed()
            await self._produce(gen)
        finally:
            self.running.pop(gen.rid, None)
        if not self.alive:
            raise ConnectionResetError("the engine died")
        self.finished += 1
        self.prompt_tokens += prompt_tokens
        self.generated_tokens += gen.produced
        return Answer(200, self._answer(gen, loop.time()))

    async def _produce(self, gen: _Generation) -> None:
        """Produce `gen`'s tokens over time: one timer per stretch between state changes."""
        loop = asyncio.get_running_loop()
        latency = self.settings.token_latency_s
        while gen.produced < gen.target and not gen.aborted and self.alive:
            if self.paused:
                if self.pause_mode == "abort":
                    gen.aborted = True
                    break
                await self._wake_future()
                continue
            started, label = loop.time(), self.label
            remaining = gen.target - gen.produced
            if self.settings.step_tokens is not None:
                remaining = min(remaining, self.settings.step_tokens)
            woke = await _sleep_or_wake(self._wake_future(), remaining * latency)
            made = remaining
            if woke:
                made = min(remaining, int((loop.time() - started) / latency) if latency else 0)
            if made:
                gen.produced += made
                if gen.spans and gen.spans[-1][0] == label:
                    gen.spans[-1][1] += made
                else:
                    gen.spans.append([label, made])
                self._progressed()

    def _answer(self, gen: _Generation, now: float) -> dict[str, Any]:
        profile = self.profile
        if gen.aborted and not gen.admitted:
            return self._queued_abort(gen, now)
        finish: dict[str, Any]
        if gen.aborted:
            finish = dict(profile.aborts.running_finish)
        else:
            finish = {"type": "length", "length": gen.produced}
        output_ids = [1 + (i % 97) for i in range(gen.produced)]
        spans, start = [], 0
        for version, length in gen.spans:
            spans.append({"version": version, "start": start, "end": start + length})
            start += length
        last = gen.spans[-1][0] if gen.spans else self.label
        values: dict[str, Any] = {
            "id": gen.rid,
            "finish_reason": finish,
            "prompt_tokens": gen.prompt_tokens,
            "weight_version": last if profile.weight_version_spans else self.label,
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": gen.produced,
            "cached_tokens": 0,
            "weight_versions": spans,
            "e2e_latency": now - gen.created,
        }
        meta = {key: values[key] for key in profile.meta_info_keys}
        if gen.return_logprob:
            meta["output_token_logprobs"] = [[-0.5, tok, None] for tok in output_ids]
        return {"text": "x" * gen.produced, "output_ids": output_ids, "meta_info": meta}

    def _queued_abort(self, gen: _Generation, now: float) -> dict[str, Any]:
        """The release's answer to a generation aborted before it started (the embedded
        engine's `_queued_abort`, from the same profile fields)."""
        aborts = self.profile.aborts
        finish = {"type": "abort", "message": aborts.queued_message}
        if not aborts.queued_has_output:
            meta: dict[str, Any] = {
                "id": gen.rid,
                "finish_reason": finish,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            }
            return {"text": "", "meta_info": meta}
        meta = {
            "id": gen.rid,
            "finish_reason": finish,
            "weight_version": self.label,
            "e2e_latency": now - gen.created,
            "weight_versions": [{"version": self.label, "start": 0, "end": 0}],
        }
        if gen.return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = []
            meta["output_token_logprobs_length"] = 0
        meta["completion_tokens"] = 0
        return {"text": "", "output_ids": [], "meta_info": meta}

    async def pause_generation(self, body: dict[str, Any]) -> Answer:
        mode = str(body.get("mode", "abort")) if self.profile.pause_modes else "abort"
        self.paused, self.pause_mode = True, mode
        self._changed()
        if mode == "abort":
            for gen in self.running.values():
                gen.aborted = True
        return Answer(200, {"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, body: dict[str, Any]) -> Answer:
        self.paused = False
        self._changed()
        return Answer(200, {"message": "Generation continued successfully.", "status": "ok"})

    async def abort_request(self, body: dict[str, Any]) -> Answer:
        rid = body.get("rid")
        for gen in self.running.values():
            if body.get("abort_all") or gen.rid == rid:
                gen.aborted = True
        self._changed()
        return Answer(200, None)

    async def update_weights_from_disk(self, body: dict[str, Any]) -> Answer:
        if not isinstance(body.get("model_path"), str):
            return Answer(400, {"error": {"message": "model_path: a path is required"}})
        await self._load(self.settings.load_time_s)
        version = body.get("weight_version")
        message = "Succeeded to update model weights."
        if version is not None:
            self._relabel(str(version))
            message += f" Weight version updated to {version}."
        return Answer(200, {"success": True, "message": message, "num_paused_requests": 0})

    async def _load(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if seconds > 0:
            await asyncio.sleep(seconds)
        self.loads += 1
        self.load_seconds += loop.time() - started

    def _relabel(self, version: str) -> None:
        self._changed()  # tokens so far are counted under the old label first
        self.label = version

    async def init_weights_update_group(self, body: dict[str, Any]) -> Answer:
        name = str(body.get("group_name", ""))
        if name in self.groups:
            message = f"Failed to initialize custom process group: {NAME_TAKEN}."
            return Answer(400, {"success": False, "message": message})
        self.groups.add(name)
        message = "Succeeded to initialize custom process group."
        return Answer(200, {"success": True, "message": message})

    async def destroy_weights_update_group(self, body: dict[str, Any]) -> Answer:
        name = str(body.get("group_name", ""))
        if name not in self.groups:
            message = f"group_name: no weight-update group {name!r} to destroy"
            return Answer(400, {"success": False, "message": message})
        self.groups.discard(name)
        message = f"Succeeded to destroy weight-update group {name!r}."
        return Answer(200, {"success": True, "message": message})

    async def begin_weight_update(self, body: dict[str, Any]) -> Answer:
        if self.session_open:
            return Answer(400, {"success": False, "message": SESSION_OPEN_MESSAGE})
        self.session_open = True
        return Answer(200, {"success": True, "message": "Success"})

    async def end_weight_update(self, body: dict[str, Any]) -> Answer:
        if not self.session_open:
            return Answer(400, {"success": False, "message": SESSION_NOT_OPEN_MESSAGE})
        self.session_open = False
        return Answer(200, {"success": True, "message": "Success"})

    async def update_weights_from_distributed(self, body: dict[str, Any]) -> Answer:
        if self.profile.weight_update_sessions and not self.session_open:
            return Answer(400, {"success": False, "message": SESSION_REQUIRED_MESSAGE})
        if str(body.get("group_name", "")) not in self.groups:
            message = "Failed to receive weights: group_name: no such weight-update group"
            return Answer(400, {"success": False, "message": message})
        await self._load(self.settings.transfer_time_s)
        version = body.get("weight_version")
        message = "Succeeded to update parameter online."
        if version is not None:
            self._relabel(str(version))
            message += f" Weight version updated to {version}."
        return Answer(200, {"success": True, "message": message})

    async def flush_cache(self, body: dict[str, Any]) -> Answer:
        return Answer(200, text=FLUSHED_TEXT)

    async def weight_version(self, body: dict[str, Any]) -> Answer:
        return Answer(200, {"weight_version": self.label})

    async def model_info(self, body: dict[str, Any]) -> Answer:
        info = {
            "model_path": "sim",
            "tokenizer_path": "sim",
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.label,
        }
        return Answer(200, info)

    async def server_info(self, body: dict[str, Any]) -> Answer:
        return Answer(
            200,
            {
                "model_path": "sim",
                "tp_size": 1,
                "weight_version": self.label,
                "internal_states": [{"running": len(self.running)}],
                "version": self.profile.release,
            },
        )

    async def health(self, body: dict[str, Any]) -> Answer:
        return Answer(200, None)

    async def ready(self, body: dict[str, Any]) -> Answer:
        ok = self.profile.ready_while_paused or not self.paused
        return Answer(200 if ok else 503, None)

    def metrics(self) -> str:
        """SGLang's declared metrics (`dressage.metrics.sglang`) with the release's labels."""
        release = self.profile.release
        known = {
            "model_name": "sim",
            "engine_type": sglang_metrics.release_labels(release).engine_type,
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
            "is_streaming": "false",
        }
        values = {
            sglang_metrics.NUM_RUNNING_REQS: len(self.running),
            sglang_metrics.NUM_QUEUE_REQS: 0,
            sglang_metrics.NUM_USED_TOKENS: 0,
            sglang_metrics.TOKEN_USAGE: 0.0,
            sglang_metrics.GEN_THROUGHPUT: 0.0,
            sglang_metrics.PROMPT_TOKENS: self.prompt_tokens,
            sglang_metrics.GENERATION_TOKENS: self.generated_tokens,
            sglang_metrics.NUM_REQUESTS: self.finished,
        }
        lines = []
        for metric in sglang_metrics.METRICS:
            if metric.name not in values:
                continue  # histograms: left out of the simulation
            names = sglang_metrics.labels_of(metric, release)
            labels = ",".join(f'{n}="{known[n]}"' for n in names)
            base = metric.name.removesuffix("_total") if metric.kind == "counter" else metric.name
            lines.append(f"# HELP {base} {metric.help}")
            lines.append(f"# TYPE {base} {metric.kind}")
            lines.append(f"{metric.name}{{{labels}}} {float(values[metric.name])}")
        return "\n".join(lines) + "\n"


async def _sleep_or_wake(wake: asyncio.Future[None], delay: float) -> bool:
    """Sleep `delay` seconds unless `wake` completes first; whether it woke early."""
    if delay <= 0:
        return False
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def finish(woke: bool) -> None:
        if not done.done():
            done.set_result(woke)

    timer = loop.call_later(delay, finish, False)

    def on_wake(_: asyncio.Future[None]) -> None:
        finish(True)

    wake.add_done_callback(on_wake)
    try:
        return await done
    finally:
        timer.cancel()
        wake.remove_done_callback(on_wake)


Route = Callable[[SimEngine, dict[str, Any]], Awaitable[Answer]]

_ROUTES: dict[str, Route] = {
    "/generate": SimEngine.generate,
    "/health": SimEngine.health,
    "/health_generate": SimEngine.health,
    "/update_weights_from_disk": SimEngine.update_weights_from_disk,
    "/init_weights_update_group": SimEngine.init_weights_update_group,
    "/destroy_weights_update_group": SimEngine.destroy_weights_update_group,
    "/begin_weight_update": SimEngine.begin_weight_update,
    "/end_weight_update": SimEngine.end_weight_update,
    "/update_weights_from_distributed": SimEngine.update_weights_from_distributed,
    "/flush_cache": SimEngine.flush_cache,
    "/pause_generation": SimEngine.pause_generation,
    "/continue_generation": SimEngine.continue_generation,
    "/abort_request": SimEngine.abort_request,
    "/get_weight_version": SimEngine.weight_version,
    "/model_info": SimEngine.model_info,
    "/get_model_info": SimEngine.model_info,
    "/server_info": SimEngine.server_info,
    "/get_server_info": SimEngine.server_info,
    "/ready": SimEngine.ready,
}
"""Every route a simulated engine can serve; the release's profile picks its own (the
embedded engine's `ENDPOINTS`, path for path)."""
