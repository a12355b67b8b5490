"""The engines of a local run, changed while it trains: add, kill (a crash), drain.

The engines are child processes (`dressage engine serve`) behind the proxy, which reads their
URLs from a file (`--engine-urls-file`, read again at every health check), as a cluster's
proxy reads the job's ConfigMap; the trainer's weight publisher follows the proxy's engine set.
`LocalFleet` keeps the processes and that file in step:

- `add()` starts an engine on the initial weights under the label `base` and lists it once it
  serves: the proxy takes it in at its next health check but does not route to it, as it
  serves another version; the publisher loads the current weights on it (`disk`: the
  background catch-up) or sends them at the next publish (`distributed`: it joins the
  weight-update groups), and from then on it is routed to, which is when `add` returns. That
  is what a cluster's new engine pod goes through.
- `kill(name)` SIGKILLs the engine, as a node lost without notice, then unlists it: its turns
  in flight fail over or are retried, counted by reason (`dressage.proxy.drain`).
- `drain(name)` asks the proxy to drain the engine (`POST /dressage/engines/drain`, what an
  engine pod's `preStop` hook sends), then stops it (SIGTERM) and unlists it, as the operator
  lists a leaving engine until its pod is gone: its turns continue on the other engines with
  their tokens kept.

`ChurnDriver` carries out a churn schedule (`dressage.runner.churn`) against a fleet while the
run trains, one change at a time in the background, and writes what each did to
`churn.json` in the run directory, with the proxy's drain and failure counters read at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dressage.metrics import (
    PROXY_DRAINED_TOKENS,
    PROXY_DRAINED_TOKENS_LOST,
    PROXY_DRAINED_TURNS,
    PROXY_ENGINE_FAILED_TURNS,
    PROXY_ENGINE_RETRIES,
)
from dressage.proxy.drain import DEFAULT_DRAIN_TIMEOUT_S
from dressage.runner.churn import ChurnAction, ChurnEvent, due, engine_name
from dressage.runner.processes import ChildProcess, stop_together
from dressage.runner.scrape import metrics_texts

ENGINE_READY = "engine ready on "
JOINING_VERSION = "base"
"""The label of the weights an added engine starts on (the operator's label for an engine pod
started on the staged base model): not a version the trainer issues, so the proxy does not
route to the engine until it serves the current one."""
STOP_GRACE_S = 15.0
"""How long a drained engine gets to exit after SIGTERM before SIGKILL."""
_HTTP_MARGIN_S = 10.0

EngineArgv = Callable[[int, Path, str], list[str]]
"""The command line of the `index`-th engine serving `model` under `version`."""


@dataclass
class FleetChange:
    """What one change of the fleet did."""

    action: str
    engine: str
    url: str | None = None
    ok: bool = True
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    """`drain`: the proxy's answer (HTTP status and body); `kill`: the exit status; `add`:
    the weights it started on."""


class LocalFleet:
    """The engine processes of one local run and the engine URLs file the proxy reads."""

    def __init__(
        self,
        root: Path,
        argv: EngineArgv,
        *,
        cpus: Sequence[int] | None = None,
        startup_deadline_s: float = 300.0,
    ) -> None:
        """`root`: the run directory (logs go to `logs/`, the URLs file is `engines.txt`)."""
        self.root = root
        self.argv = argv
        self.cpus = cpus
        self.startup_deadline_s = startup_deadline_s
        self.urls_file = root / "engines.txt"
        self.proxy_urls: list[str] = []
        """The proxy replicas (set once they serve): `drain` drains on every one, `add` waits
        until every one routes to the new engine."""
        self.children: dict[str, ChildProcess] = {}
        """Every engine started, by name, running or not (in start order)."""
        self.urls: dict[str, str] = {}
        """The engines listed for the proxy, by name."""
        self._started = 0
        self._routed_version: str | None = None
        self._last_view: dict[str, Any] | None = None
        """The proxy's last view of the engine an `add` waits for (reported when it times out)."""

    @property
    def running(self) -> list[str]:
        """The names of the listed engines, oldest first."""
        return list(self.urls)

    async def start(self, count: int, model: Path, version: str) -> list[str]:
        """Start `count` engines serving `model` as `version`, list them; their URLs."""
        children = [self._spawn(model, version) for _ in range(count)]
        urls = await asyncio.gather(
            *(c.wait_for(ENGINE_READY, self.startup_deadline_s) for c in children)
        )
        for child, url in zip(children, urls, strict=True):
            self.urls[child.name] = url
        self._write()
        return list(urls)

    async def add(self, model: Path, *, routable_deadline_s: float = 90.0) -> FleetChange:
        """Start one more engine on `model` under `JOINING_VERSION`, list it once it serves,
        and return once the proxy routes to it (it serves the current weights), so the next
        change of a schedule finds it in service; `ok` False if that took longer than
        `routable_deadline_s` (the engine stays listed; `detail` has the proxy's last view of
        it, which says why it was not routed to)."""
        started = time.monotonic()
        child = self._spawn(model, JOINING_VERSION)
        url = await child.wait_for(ENGINE_READY, self.startup_deadline_s)
        serving = time.monotonic() - started
        self.urls[child.name] = url
        self._write()
        routed = await self._routable(url, routable_deadline_s)
        return FleetChange(
            "add",
            child.name,
            url,
            ok=routed is not None,
            seconds=time.monotonic() - started,
            detail={
                "model": str(model),
                "weight_version": JOINING_VERSION,
                "serving_s": round(serving, 3),
                "routed_s": None if routed is None else round(routed - started, 3),
                "routed_version": None if routed is None else self._routed_version,
                **({} if routed is not None else {"proxy_view": self._last_view}),
            },
        )

    async def _routable(self, url: str, deadline_s: float) -> float | None:
        """When the proxy first listed `url` as routable (`time.monotonic()`), None past the
        deadline (or without a proxy to ask)."""
        self._last_view = None
        if not self.proxy_urls:
            return None
        end = time.monotonic() + deadline_s
        async with httpx.AsyncClient(timeout=10.0) as client:
            while time.monotonic() < end:
                views = await asyncio.gather(
                    *(_engine_view(client, proxy, url) for proxy in self.proxy_urls)
                )
                pending = [v for v in views if v is None or not v.get("routable")]
                if not pending:
                    self._routed_version = views[0].get("weight_version") if views[0] else None
                    return time.monotonic()
                self._last_view = pending[0]
                await asyncio.sleep(0.2)
        return None

    async def kill(self, name: str) -> FleetChange:
        """SIGKILL engine `name` (a crash: no drain), then unlist it."""
        child, url = self._listed(name)
        started = time.monotonic()
        process = child.process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        code = await asyncio.to_thread(process.wait)
        self._unlist(name)
        return FleetChange(
            "kill", name, url, seconds=time.monotonic() - started, detail={"exit_code": code}
        )

    async def drain(self, name: str, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S) -> FleetChange:
        """Drain engine `name` through the proxy, then stop it (SIGTERM) and unlist it. The
        engine stops even when the drain failed (`ok` False, the proxies' answers in
        `detail`), as an engine pod does once its `preStop` hook returned. With several proxy
        replicas it does what the hook does: mark the engine draining on every replica
        (`"abort": false`), then drain it on each, since one replica's abort ends the engine's
        generations of all of them."""
        child, url = self._listed(name)
        if not self.proxy_urls:
            raise RuntimeError("the fleet drains through the proxy: set proxy_urls first")
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=timeout_s + _HTTP_MARGIN_S) as client:

            async def call(proxy: str, body: dict[str, Any]) -> dict[str, Any]:
                try:
                    answer = await client.post(f"{proxy}/dressage/engines/drain", json=body)
                except httpx.HTTPError as exc:
                    return {"proxy": proxy, "error": f"{type(exc).__name__}: {exc}"}
                return {
                    "proxy": proxy,
                    "status": answer.status_code,
                    "answer": _json_or_text(answer),
                }

            if len(self.proxy_urls) > 1:
                await asyncio.gather(
                    *(call(p, {"url": url, "abort": False}) for p in self.proxy_urls)
                )
            answers = await asyncio.gather(
                *(call(p, {"url": url, "timeout_s": timeout_s}) for p in self.proxy_urls)
            )
        ok = all(a.get("status") == 200 for a in answers)
        detail: dict[str, Any] = dict(answers[0]) if len(answers) == 1 else {"replicas": answers}
        detail["drain_seconds"] = round(time.monotonic() - started, 3)
        detail["exit_code"] = await asyncio.to_thread(child.stop, STOP_GRACE_S)
        self._unlist(name)
        return FleetChange("drain", name, url, ok, time.monotonic() - started, detail)

    def stop_all(self) -> None:
        """Stop every engine still running (SIGTERM to all, then SIGKILL), newest first."""
        stop_together(list(reversed(self.children.values())))

    # --- internals

    def _spawn(self, model: Path, version: str) -> ChildProcess:
        index = self._started
        self._started += 1
        name = engine_name(index)
        child = ChildProcess(
            name,
            self.argv(index, model, version),
            log_path=self.root / "logs" / f"{name}.log",
            cpus=self.cpus,
        )
        self.children[name] = child
        child.start()
        return child

    def _listed(self, name: str) -> tuple[ChildProcess, str]:
        if name not in self.urls:
            raise ValueError(f"no engine {name} running (running: {', '.join(self.urls)})")
        return self.children[name], self.urls[name]

    def _unlist(self, name: str) -> None:
        del self.urls[name]
        self._write()

    def _write(self) -> None:
        """Replace the URLs file whole (renamed over), so the proxy reads the old list or the
        new one, never part of it."""
        self.urls_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.urls_file.with_suffix(".tmp")
        partial.write_text("".join(f"{url}\n" for url in self.urls.values()), encoding="utf-8")
        os.replace(partial, self.urls_file)


class ChurnDriver:
    """Carries out churn events against a `LocalFleet` as the run's steps are recorded."""

    def __init__(
        self,
        fleet: LocalFleet,
        events: Sequence[ChurnEvent],
        *,
        model: Path,
        out: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`model`: the weights an added engine starts on."""
        self.fleet = fleet
        self.events = tuple(events)
        self.model = model
        self.out = out
        self.clock = clock
        self.started = clock()
        self.done: list[dict[str, Any]] = []
        """Each event carried out: the event, when, and its `FleetChange`."""
        self.proxy: dict[str, Any] = {}
        """The proxy's drain and engine-failure counters, read at `aclose`."""
        self._queue: asyncio.Queue[ChurnEvent] = asyncio.Queue()
        self._pending = 0
        """Events queued and not carried out yet (the one under way included)."""
        self._worker: asyncio.Task[None] | None = None

    @property
    def path(self) -> Path:
        return self.fleet.root / "churn.json"

    def on_step(self, step: int) -> None:
        """Queue the events due after step `step` (carried out in order, in the background)."""
        for event in due(self.events, step):
            self._queue.put_nowait(event)
            self._pending += 1
        if self._worker is None and not self._queue.empty():
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            at = self.clock() - self.started
            self.out(f"churn: {event.action.value} {event.engine} (after step {event.step})")
            try:
                change = await self._apply(event)
            except Exception as exc:  # reported, and the run goes on without this change
                change = FleetChange(
                    event.action.value, event.engine, ok=False, detail={"error": str(exc)}
                )
            self.done.append({"step": event.step, "at_s": round(at, 3), **asdict(change)})
            state = "done" if change.ok else "FAILED"
            self.out(
                f"churn: {event.action.value} {event.engine} {state} in {change.seconds:.1f}s"
                + (f": {change.detail}" if not change.ok else "")
            )
            self._pending -= 1
            self._write()

    async def _apply(self, event: ChurnEvent) -> FleetChange:
        if event.action is ChurnAction.ADD:
            change = await self.fleet.add(self.model)
            assert change.engine == event.engine, (change.engine, event.engine)
            return change
        if event.action is ChurnAction.KILL:
            return await self.fleet.kill(event.engine)
        return await self.fleet.drain(event.engine)

    async def aclose(self, *, wait_s: float = 60.0) -> None:
        """Let the change under way finish (at most `wait_s`), record the events not carried
        out, read the proxy's counters and write `churn.json`."""
        if self._worker is not None:
            deadline = self.clock() + wait_s
            while self._pending:
                if self.clock() >= deadline:
                    break
                await asyncio.sleep(0.1)
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        if self.fleet.proxy_urls:
            self.proxy = await read_proxy_churn_figures(self.fleet.proxy_urls)
        self._write()

    def summary(self) -> dict[str, Any]:
        carried = {(d["step"], d["action"], d["engine"]) for d in self.done}
        return {
            "schedule": [str(e) for e in self.events],
            "events": self.done,
            "not_carried_out": [
                str(e) for e in self.events if (e.step, e.action.value, e.engine) not in carried
            ],
            "proxy": self.proxy,
            "engines_at_end": self.fleet.running,
        }

    def _write(self) -> None:
        self.path.write_text(json.dumps(self.summary(), indent=2) + "\n", encoding="utf-8")


async def read_proxy_churn_figures(proxy_urls: Sequence[str]) -> dict[str, Any]:
    """The proxies' counters of what churn cost, summed over the replicas: turns and tokens
    moved by drains, the moved tokens whose turn then failed (by reason), turns an engine
    failure hit (by reason), generations resent; a replica that does not answer adds
    nothing (`replicas_read` says how many did)."""
    figures: dict[str, Any] = {
        "drained_turns": 0.0,
        "drained_tokens": 0.0,
        "engine_retries": 0.0,
        "engine_failed_turns": {},
        "drained_tokens_lost": {},
        "replicas_read": 0,
    }
    plain = {
        PROXY_DRAINED_TURNS: "drained_turns",
        PROXY_DRAINED_TOKENS: "drained_tokens",
        PROXY_ENGINE_RETRIES: "engine_retries",
    }
    by_reason = {
        PROXY_ENGINE_FAILED_TURNS: "engine_failed_turns",
        PROXY_DRAINED_TOKENS_LOST: "drained_tokens_lost",
    }
    async with httpx.AsyncClient(timeout=10.0) as client:
        texts = await metrics_texts(client, proxy_urls)
    for text in texts.values():
        if text is None:
            continue
        figures["replicas_read"] += 1
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in plain:
                    figures[plain[sample.name]] += sample.value
                elif sample.name in by_reason:
                    counts = figures[by_reason[sample.name]]
                    reason = sample.labels["reason"]
                    counts[reason] = counts.get(reason, 0.0) + sample.value
    return figures


async def _engine_view(client: httpx.AsyncClient, proxy: str, url: str) -> dict[str, Any] | None:
    """One proxy's entry for engine `url` in `GET /dressage/engines` (None: not listed, or
    the proxy did not answer)."""
    try:
        body = (await client.get(f"{proxy}/dressage/engines")).json()
    except (httpx.HTTPError, ValueError):
        return None
    for engine in body.get("engines", []):
        if engine.get("url") == url:
            found: dict[str, Any] = engine
            return found
    return None


def _json_or_text(answer: httpx.Response) -> Any:
    try:
        return answer.json()
    except ValueError:
        return answer.text[:500]
