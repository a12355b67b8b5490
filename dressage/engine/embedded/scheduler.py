"""Continuous batching for the embedded engine, in one dedicated thread.

The HTTP side never runs a forward pass: it submits commands to a queue and receives results
through callbacks. The scheduler thread loops over *steps*; a step is a token boundary:

1. apply every queued command (new request, abort, pause, continue, weight swap, stop);
2. unless paused, admit waiting requests into free KV-cache slots (prefill + first token);
3. one batched decode step that gives every other running request its next token.

Commands therefore take effect only between tokens: an abort returns exactly the tokens produced
so far, a pause holds requests with their KV cache intact, and a weight swap is atomic (each
token is computed entirely with the old or entirely with the new weights) and every later token
carries the new version. Each request records its tokens' versions as spans.

A request that asks for its routed experts (MoE models) keeps the experts each forwarded token
was routed to, a row per token (prefill rows, then one per decode step; a retracted request's
recomputed prefill replaces them), and its final answer carries them as SGLang does
(`meta_info.routed_experts`, `dressage.data.expert_routing`).

Per-request seeded generators make sampling independent of batch composition: for a given
engine seed and request order (or per-request `sampling_seed`) the tokens are reproducible.

With a minimum step interval (`StepPacer`) two steps never start less than that interval apart,
so no request gains more than one token per interval: it emulates a slower accelerator and
bounds generation speed from above, whatever the machine. Commands are still applied while a
step waits for its turn, so an abort, pause or weight swap never waits out the interval.

A swap lands at the next token boundary even while requests run. SGLang's updates wait for
in-flight generations unless generation is paused (its model-update lock); the HTTP layer
(`dressage.engine.embedded.endpoints.weights`) adds that wait, so what reaches the scheduler is what
SGLang's scheduler would see.

Aborted requests record why (`abort_cause`) and whether they had been admitted (`admitted`,
i.e. their prefill ran): SGLang answers an abort of a queued request differently from one of a
running request, and the HTTP layer shapes the answer as the served release does.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from tokenizers import Tokenizer

from dressage.data.expert_routing import RoutedExperts
from dressage.data.spans import VersionSpan, extend_spans, spans_to_sglang
from dressage.engine.embedded.adapters import AdapterSet
from dressage.engine.embedded.model import Decoder, KVCache, ModelShape, ModelWeights, new_routes
from dressage.engine.embedded.model.lora import decode_by_weights
from dressage.engine.embedded.pacing import SchedulerStats, StepPacer
from dressage.engine.embedded.sampling import GREEDY_EPS, SamplingSpec, request_seed, sample
from dressage.engine.protocol import SamplingParams

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any], bool], None]
"""Receives a response snapshot (SGLang JSON shape) and whether it is the final one."""


@dataclasses.dataclass
class Request:
    """One generation request as the scheduler tracks it."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    emit: Emit
    return_logprob: bool = False
    return_text_in_logprobs: bool = False
    stream: bool = False
    created: float = dataclasses.field(default_factory=time.monotonic)
    output_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    spans: list[VersionSpan] = dataclasses.field(default_factory=list)
    """The output tokens' versions as runs, in order."""
    finish_reason: dict[str, Any] | None = None
    text_end: int | None = None
    """Where `text` is cut when a stop string matched (None: not cut)."""
    slot: int | None = None
    generator: torch.Generator | None = None
    cache_valid: bool = False
    """Whether the slot's KV cache holds prompt + output[:-1] (False after a retract)."""
    return_routed_experts: bool = False
    routed_experts_start_len: int = 0
    routes: list[torch.Tensor] = dataclasses.field(default_factory=list)
    """With `return_routed_experts`: the routed experts of the forwarded tokens, in chunks
    `[tokens, layers, top_k]` that cover prompt + output[:-1] in order."""
    admitted: bool = False
    """Whether the request was ever admitted (its prefill ran)."""
    first_token_at: float | None = None
    """When its first output token was produced (`time.monotonic`, as `created`)."""
    abort_cause: str | None = None
    """Why it was aborted: `request`, `pause`, `update` or `shutdown` (None: not aborted)."""
    lora: str | None = None
    """The LoRA adapter it runs with (`lora_path`; None: the base weights)."""

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)


@dataclasses.dataclass(frozen=True)
class SwapResult:
    aborted: int
    """Requests aborted by `abort_all`."""
    flushed: bool
    """Whether the cache flush after the swap found the engine idle (True without a flush)."""


@dataclasses.dataclass
class _Command:
    kind: str
    args: dict[str, Any]
    done: Future[Any] | None = None


class Scheduler:
    """Owns the weights, the KV cache and every request; runs in its own thread."""

    def __init__(
        self,
        *,
        shape: ModelShape,
        tokenizer: Tokenizer,
        seed: int,
        max_batch_size: int,
        context_length: int,
        weight_version: str,
        min_step_interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        device: torch.device | str = "cpu",
    ) -> None:
        self.shape = shape
        self.tokenizer = tokenizer
        self.seed = seed
        self.max_batch_size = max_batch_size
        self.context_length = context_length
        self._version = weight_version
        self._weights: ModelWeights | None = None
        self.adapters = AdapterSet()
        """LoRA adapters by name (scheduler thread; `lora_load`/`lora_unload` commands)."""
        self.device = torch.device(device)
        """Where the weights, the KV cache and the forward passes live (sampling is on CPU)."""
        self._decoder = Decoder(shape, context_length, self.device)
        self._cache = KVCache(shape, max_batch_size, context_length, self.device)
        self._free_slots = list(range(max_batch_size))
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._paused = False
        self._stopping = False
        self._arrivals = 0
        self._pacer = StepPacer(min_step_interval_s)
        self.stats = SchedulerStats()
        self._clock = clock
        self._commands: queue.Queue[_Command] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="engine-scheduler", daemon=True)
        self.on_finish: Callable[[Request], None] | None = None
        """Called on the scheduler thread with each request as it finishes (its metrics)."""
        # Thread-safe snapshots for the HTTP side.
        self.loaded = False
        self.paused = False
        self.alive = False

    # --- public API (any thread)

    @property
    def weight_version(self) -> str:
        return self._version

    @property
    def min_step_interval_s(self) -> float:
        return self._pacer.interval_s

    @property
    def weights(self) -> ModelWeights | None:
        """The weights the next step uses (a swap still queued is not reflected)."""
        return self._weights

    def start(self) -> None:
        self.alive = True
        self._thread.start()

    def running_requests(self) -> list[Request]:
        """A copy of the running requests (any thread: a snapshot for the metrics)."""
        return list(self._running)

    def waiting_count(self) -> int:
        return len(self._waiting)

    def submit(self, request: Request) -> None:
        self._put("submit", request=request)

    def abort(self, rid: str | None, abort_all: bool = False) -> None:
        self._put("abort", rid=rid, abort_all=abort_all)

    def pause(self, mode: str) -> Future[None]:
        return self._put("pause", mode=mode)

    def resume(self) -> Future[None]:
        return self._put("resume")

    def swap_weights(
        self, weights: ModelWeights, version: str | None, *, abort_all: bool, flush: bool = False
    ) -> Future[SwapResult]:
        """Install `weights` at the next token boundary (paused or not; the pause state is
        unchanged); resolves to what happened (`SwapResult`). With `flush`, the result says
        whether a cache flush right after the swap would have found the engine idle."""
        return self._put("swap", weights=weights, version=version, abort_all=abort_all, flush=flush)

    def flush(self) -> Future[bool]:
        """Whether the cache can be flushed now: nothing running and, unless paused, nothing
        waiting (SGLang's `flush_cache` and its `is_fully_idle(ignore_waiting=paused)`; this
        engine keeps no prefix cache, so idleness is all a flush checks)."""
        return self._put("flush")

    def internal_state(self) -> Future[dict[str, Any]]:
        """A snapshot taken on the scheduler thread (what SGLang's `get_internal_state` asks
        its scheduler for): running, waiting, paused, version."""
        return self._put("state")

    def adapter_command(self, kind: str, **args: Any) -> Future[Any]:
        """`lora_load` (`name`, `path`, the adapter's `weights`) or `lora_unload` (`name`;
        resolves to a future of the unload's answer), applied between two steps."""
        return self._put(kind, **args)

    def has_rid(self, rid: str) -> Future[bool]:
        return self._put("has_rid", rid=rid)

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        self._put("stop")
        self._thread.join(timeout_s)

    def _put(self, kind: str, **args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        self._commands.put(_Command(kind, args, done))
        return done

    # --- scheduler thread

    def _loop(self) -> None:
        try:
            while not self._stopping:
                idle = not self._has_work()
                self._drain_commands(block=idle)
                if self._stopping or not self._has_work():
                    continue
                wait_s = self._pacer.wait_s(self._clock())
                if wait_s > 0:
                    # Wait for the step's turn on the command queue: whatever arrives meanwhile
                    # (abort, pause, swap) is applied now, then the loop looks again.
                    self._drain_commands(block=True, timeout_s=wait_s)
                    continue
                started = self._clock()
                self._pacer.started(started)
                admitted = self._admit()
                decoded = self._decode_step(exclude=admitted)
                occupancy = max(self._pacer.interval_s, self._clock() - started)
                self.stats.record_step(seconds=occupancy, tokens=len(admitted) + decoded)
        except Exception:
            log.exception("engine scheduler crashed")
            raise
        finally:
            self.alive = False
            for request in [*self._running, *self._waiting]:
                request.abort_cause = "shutdown"
                self._finish(request, {"type": "abort", "message": "engine shutting down"})
            self._running.clear()
            self._waiting.clear()
            while not self._commands.empty():
                command = self._commands.get_nowait()
                if command.done is not None and not command.done.done():
                    command.done.set_exception(RuntimeError("engine is shutting down"))

    def _can_admit(self) -> bool:
        return not self._paused and self._weights is not None and bool(self._free_slots)

    def _has_work(self) -> bool:
        """Whether a step would produce a token now (a running or admissible request)."""
        if self._paused or self._weights is None:
            return False
        return bool(self._running) or (bool(self._waiting) and bool(self._free_slots))

    def _drain_commands(self, *, block: bool, timeout_s: float = 0.5) -> None:
        try:
            command = (
                self._commands.get(timeout=timeout_s) if block else self._commands.get_nowait()
            )
        except queue.Empty:
            return
        while True:
            try:
                result = self._apply(command)
            except Exception as exc:  # a bad command must not kill the engine
                log.exception("engine command %s failed", command.kind)
                if command.done is not None and not command.done.done():
                    command.done.set_exception(exc)
            else:
                if command.done is not None and not command.done.done():
                    command.done.set_result(result)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, command: _Command) -> Any:
        args = command.args
        if command.kind == "submit":
            request: Request = args["request"]
            if request.params.sampling_seed is None:
                self._arrivals += 1  # only unseeded requests depend on arrival order
            seed = request_seed(self.seed, request.params.sampling_seed, self._arrivals)
            request.generator = torch.Generator().manual_seed(seed)
            self._waiting.append(request)
            return None
        if command.kind == "abort":
            return self._abort(args["rid"], args["abort_all"], "Aborted by request.", "request")
        if command.kind == "pause":
            mode = args["mode"]
            if mode == "abort":
                self._abort(None, True, "Aborted by pause_generation.", "pause")
            elif mode == "retract":
                for request in reversed(self._running):
                    self._release_slot(request)
                    request.cache_valid = False
                    self._waiting.appendleft(request)
                self._running.clear()
            self._paused = self.paused = True
            return None
        if command.kind == "lora_load":
            return self.adapters.load(args["name"], args["path"], args["weights"])
        if command.kind == "lora_unload":
            return self.adapters.unload(args["name"], (r.lora for r in self._in_flight()))
        if command.kind == "resume":
            self._paused = self.paused = False
            return None
        if command.kind == "swap":
            aborted = 0
            if args["abort_all"]:
                aborted = self._abort(None, True, "Aborted for a weight update.", "update")
            self._weights = args["weights"]
            if args["version"] is not None:
                self._version = args["version"]
            self.loaded = True
            return SwapResult(aborted, self._idle() if args["flush"] else True)
        if command.kind == "flush":
            return self._idle()
        if command.kind == "state":
            return {
                "running": len(self._running),
                "waiting": len(self._waiting),
                "paused": self._paused,
                "weight_version": self._version,
            }
        if command.kind == "has_rid":
            rid = args["rid"]
            return any(r.rid == rid for r in [*self._running, *self._waiting])
        if command.kind == "stop":
            self._stopping = True
            return None
        raise ValueError(f"unknown engine command {command.kind!r}")

    def _idle(self) -> bool:
        return not self._running and (self._paused or not self._waiting)

    def _abort(self, rid: str | None, abort_all: bool, message: str, cause: str) -> int:
        everyone = [*self._running, *self._waiting]
        targets = [r for r in everyone if abort_all or (rid is not None and r.rid == rid)]
        for request in targets:
            if request in self._running:
                self._running.remove(request)
            else:
                self._waiting.remove(request)
            request.abort_cause = cause
            self._finish(request, {"type": "abort", "message": message})
        return len(targets)

    def _admit(self) -> set[str]:
        admitted: set[str] = set()
        while self._waiting and self._free_slots:
            request = self._waiting.popleft()
            max_new = request.params.max_new_tokens
            if max_new == 0:
                self._finish(request, {"type": "length", "length": 0})
                continue
            assert self._weights is not None
            request.slot = self._free_slots.pop(0)
            request.admitted = True
            if request.output_ids:
                # Re-admitted after a retract: recompute the cache, the next token is pending.
                tokens = [*request.prompt_ids, *request.output_ids[:-1]]
                self.stats.prefill_tokens += len(tokens)
                routes = self._routes_for(request, len(tokens))
                weights = self.adapters.weights_for(request.lora, self._weights)
                self._decoder.prefill(weights, self._cache, request.slot, tokens, routes)
                request.routes = [] if routes is None else [routes]
                request.cache_valid = True
                self._running.append(request)
                continue
            self.stats.prefill_tokens += len(request.prompt_ids)
            routes = self._routes_for(request, len(request.prompt_ids))
            weights = self.adapters.weights_for(request.lora, self._weights)
            logits = self._decoder.prefill(
                weights, self._cache, request.slot, request.prompt_ids, routes
            )[-1]
            if routes is not None:
                request.routes = [routes]
            request.cache_valid = True
            admitted.add(request.rid)
            self._running.append(request)
            self._take_token(request, logits)
        return admitted

    def _decode_step(self, exclude: set[str]) -> int:
        """One batched decode step over the running requests not in `exclude`; returns how
        many got a token."""
        batch = [r for r in self._running if r.rid not in exclude]
        if not batch:
            return 0
        assert self._weights is not None
        order = sorted(batch, key=lambda r: r.slot if r.slot is not None else -1)
        routing = any(r.return_routed_experts for r in order)
        routes = new_routes(self.shape, len(order)) if routing else None
        base = self._weights
        logits = decode_by_weights(
            self._decoder,
            [self.adapters.weights_for(r.lora, base) for r in order],
            self._cache,
            slots=[r.slot for r in order if r.slot is not None],
            tokens=[r.output_ids[-1] for r in order],
            positions=[r.length - 1 for r in order],
            routes=routes,
        )
        if routes is not None:
            for row, request in enumerate(order):
                if request.return_routed_experts:
                    request.routes.append(routes[row : row + 1])
        # Greedy rows need no generator: pick them all at once (same math as `sample`).
        plain_greedy = [
            row
            for row, r in enumerate(order)
            if r.params.temperature < GREEDY_EPS and len(r.output_ids) >= r.params.min_new_tokens
        ]
        picked: dict[int, tuple[int, float]] = {}
        if plain_greedy:
            logprobs = torch.log_softmax(logits[plain_greedy].float(), dim=-1)
            best = torch.argmax(logprobs, dim=-1)
            chosen = logprobs.gather(1, best.unsqueeze(1))[:, 0]
            for row, token, logprob in zip(
                plain_greedy, best.tolist(), chosen.tolist(), strict=True
            ):
                picked[row] = (int(token), float(logprob))
        for row, request in enumerate(order):
            self._take_token(request, logits[row], picked.get(row))
        return len(order)

    def _take_token(
        self, request: Request, logits: torch.Tensor, picked: tuple[int, float] | None = None
    ) -> None:
        params = request.params
        stop_ids = self._stop_ids(request)
        if picked is not None:
            token, logprob = picked
        else:
            if len(request.output_ids) < params.min_new_tokens and stop_ids:
                logits = logits.clone()
                logits[list(stop_ids)] = float("-inf")
            spec = SamplingSpec(params.temperature, params.top_p, params.top_k, params.min_p)
            assert request.generator is not None
            token, logprob = sample(logits, spec, request.generator)
        request.output_ids.append(token)
        request.logprobs.append(logprob)
        if request.first_token_at is None:
            request.first_token_at = time.monotonic()
        extend_spans(request.spans, (VersionSpan(self._version, 1),))
        finish = self._check_finished(request, token, stop_ids)
        if finish is not None:
            self._running.remove(request)
            self._finish(request, finish)
        elif request.stream:
            interval = params.stream_interval or 1
            if len(request.output_ids) % interval == 0:
                request.emit(self._snapshot(request), False)

    def _routes_for(self, request: Request, tokens: int) -> torch.Tensor | None:
        return new_routes(self.shape, tokens) if request.return_routed_experts else None

    def _stop_ids(self, request: Request) -> set[int]:
        ids = set(request.params.stop_token_ids or [])
        if not request.params.ignore_eos:
            ids.update(self.shape.eos_token_ids)
        return ids

    def _check_finished(
        self, request: Request, token: int, stop_ids: set[int]
    ) -> dict[str, Any] | None:
        params = request.params
        n = len(request.output_ids)
        if params.max_new_tokens is not None and n >= params.max_new_tokens:
            return {"type": "length", "length": n}
        if token in stop_ids:
            return {"type": "stop", "matched": token}
        stops = params.stop_strings()
        regexes = params.stop_regexes()
        if stops or regexes:
            text = self._decode(request.output_ids, params)
        if stops:
            tail_len = max(len(s) for s in stops) + 8
            start = max(0, len(text) - tail_len)
            for stop in stops:
                at = text.find(stop, start)
                if at >= 0:
                    request.text_end = None if params.no_stop_trim else at
                    return {"type": "stop", "matched": stop}
        for pattern in regexes:
            # The whole text, not a tail: the regex may need context before the new token.
            found = re.search(pattern, text)
            if found is not None:
                request.text_end = None if params.no_stop_trim else found.start()
                # SGLang reports the pattern (0.5.23 `FINISHED_MATCHED_REGEX(stop_regex_str)`).
                return {"type": "stop", "matched": pattern}
        if request.length >= self.context_length:
            return {"type": "length", "length": n}
        return None

    def _release_slot(self, request: Request) -> None:
        if request.slot is not None:
            self._free_slots.append(request.slot)
            self._free_slots.sort()
            request.slot = None

    def _in_flight(self) -> list[Request]:
        return [*self._running, *self._waiting]

    def _finish(self, request: Request, reason: dict[str, Any]) -> None:
        self._release_slot(request)
        request.finish_reason = reason
        if request.lora is not None and self.adapters.unloading:
            self.adapters.release(r.lora for r in self._in_flight() if r is not request)
        if self.on_finish is not None:
            try:
                self.on_finish(request)
            except Exception:  # counting must never stop the scheduler
                log.exception("counting the finished request %s failed", request.rid)
        try:
            request.emit(self._snapshot(request), True)
        except Exception:  # the receiver went away; nothing to deliver to
            log.debug("could not deliver the result of %s", request.rid, exc_info=True)

    def _decode(self, ids: list[int], params: SamplingParams) -> str:
        text: str = self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
        return text

    def _snapshot(self, request: Request) -> dict[str, Any]:
        text = self._decode(request.output_ids, request.params)
        if request.text_end is not None:
            text = text[: request.text_end]
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": request.finish_reason,
            "prompt_tokens": len(request.prompt_ids),
            "completion_tokens": len(request.output_ids),
            "cached_tokens": 0,
            "weight_version": request.spans[-1].version if request.spans else self._version,
            "weight_versions": spans_to_sglang(request.spans),
            "e2e_latency": time.monotonic() - request.created,
        }
        if request.return_routed_experts and request.finish_reason is not None and request.routes:
            rows = torch.cat(request.routes)[request.routed_experts_start_len :]
            if len(rows):
                width = rows.shape[1] * rows.shape[2]
                data = rows.contiguous().numpy().astype("<i4").tobytes()
                meta["routed_experts"] = RoutedExperts(data, len(rows), width).to_base64()
        if request.return_logprob:
            with_text = request.return_text_in_logprobs
            decode = self.tokenizer.decode
            meta["output_token_logprobs"] = [
                [lp, tok, decode([tok], skip_special_tokens=False) if with_text else None]
                for lp, tok in zip(request.logprobs, request.output_ids, strict=True)
            ]
        return {"text": text, "output_ids": list(request.output_ids), "meta_info": meta}
