"""Many simulated SGLang engines (`dressage_testkit.sim_engine`) on loopback ports, one event loop.

    async with SimFleet(256, SimSettings(token_latency_s=0.002)) as fleet:
        fleet.urls            # http://127.0.0.1:<port>, one per engine
        await fleet.kill(3)   # engine 3 dies: its port refuses, its generations are cut
        await fleet.restart(3)  # it comes back on the same port, on its start-up weights

One aiohttp application serves every engine; each engine has a listening socket of its own
(a `TCPSite`), and a request finds its engine by the local port it arrived on. Nothing runs per
engine but its timers, so a thousand engines fit on two cores: what a benchmark measures is the
control plane around them (the proxy, the publishers), not the simulation.

`python -m dressage_testkit.sim_fleet --engines N` serves a fleet from a process of its own and
prints one URL per line, then `ready`, for a benchmark that keeps the simulation off its own
event loop. It then reads commands on its standard input, one a line, and answers each with one
line: `kill I` and `restart I` (`ok`), `stats` (a JSON object: per engine, the generations
asked, the weight loads and the seconds they took, the version served). It stops at the end of
its input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import Any

from aiohttp import web

from dressage_testkit.sim_engine import SimEngine, SimSettings, long_tail_lengths

__all__ = ["SimFleet", "SimSettings"]

KEEPALIVE_TIMEOUT_S = 5.0
"""Seconds an idle connection stays open (uvicorn's `timeout_keep_alive`, as SGLang runs it)."""


class SimFleet:
    """`count` simulated engines serving on loopback (an async context manager)."""

    def __init__(
        self,
        count: int,
        settings: SimSettings | None = None,
        *,
        keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S,
    ) -> None:
        if count < 1:
            raise ValueError(f"count: at least one engine, got {count}")
        self.settings = settings or SimSettings()
        self.engines = [SimEngine(i, self.settings) for i in range(count)]
        self.ports: list[int] = [0] * count
        self._by_port: dict[int, SimEngine] = {}
        self._sites: list[web.TCPSite | None] = [None] * count
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._serve)
        # SGLang serves through uvicorn with its default `timeout_keep_alive` of 5 s; aiohttp's
        # own default (75 s) would hold a thousand engines' idle connections open 15 times
        # longer than an engine does, past the process's file limit.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, keepalive_timeout=keepalive_timeout_s
        )

    @property
    def open_connections(self) -> int:
        """Connections the engines hold open (idle ones until their keep-alive timeout)."""
        server = self._runner.server
        return 0 if server is None else len(server.connections)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    async def __aenter__(self) -> SimFleet:
        await self._runner.setup()
        for index in range(len(self.engines)):
            await self._listen(index)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for engine in self.engines:
            engine.kill()
        await self._runner.cleanup()

    async def _listen(self, index: int) -> None:
        site = web.TCPSite(
            self._runner, "127.0.0.1", self.ports[index], backlog=1024, reuse_address=True
        )
        await site.start()
        server = site._server  # the asyncio server: its socket names the port
        assert isinstance(server, asyncio.base_events.Server)
        port = server.sockets[0].getsockname()[1]
        self.ports[index] = port
        self._sites[index] = site
        self._by_port[port] = self.engines[index]

    async def kill(self, index: int) -> None:
        """Engine `index` dies: its socket closes and its generations are cut off."""
        site = self._sites[index]
        self.engines[index].kill()
        self._by_port.pop(self.ports[index], None)
        if site is not None:
            self._sites[index] = None
            await site.stop()

    async def restart(self, index: int) -> None:
        """Engine `index` starts again on its port, with its start-up weights and no state."""
        if self._sites[index] is not None:
            await self.kill(index)
        self.engines[index] = SimEngine(index, self.settings)
        await self._listen(index)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        engine = self._by_port.get(sockname[1]) if sockname else None
        if engine is None or not engine.alive:
            _drop(request)
            return web.Response(status=503)
        body: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw:
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    return web.json_response({"error": {"message": "body: not JSON"}}, status=400)
                if isinstance(parsed, dict):
                    body = parsed
        try:
            answer = await engine.handle(request.method, "/" + request.match_info["path"], body)
        except ConnectionResetError:
            _drop(request)
            return web.Response(status=503)
        if answer.text is not None:
            return web.Response(status=answer.status, text=answer.text)
        if answer.body is None:
            return web.Response(status=answer.status)
        return web.json_response(answer.body, status=answer.status)


def _drop(request: web.Request) -> None:
    """Close the connection without an answer, as a dead engine does."""
    if request.transport is not None:
        request.transport.abort()


async def _serve_forever(args: argparse.Namespace) -> None:
    settings = SimSettings(
        release=args.release,
        token_latency_s=args.token_latency_ms / 1000,
        lengths=long_tail_lengths(args.mean_tokens, args.max_tokens),
        load_time_s=args.load_time_ms / 1000,
        transfer_time_s=args.transfer_time_ms / 1000,
    )
    async with SimFleet(args.engines, settings) as fleet:
        for url in fleet.urls:
            print(url)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        with contextlib.suppress(asyncio.CancelledError):
            while line := await reader.readline():
                print(await _command(fleet, line.decode().split()), flush=True)


async def _command(fleet: SimFleet, words: list[str]) -> str:
    """The answer line to one command of the fleet process's standard input."""
    if words[:1] == ["kill"]:
        await fleet.kill(int(words[1]))
        return "ok"
    if words[:1] == ["restart"]:
        await fleet.restart(int(words[1]))
        return "ok"
    if words[:1] == ["stats"]:
        engines = fleet.engines
        return json.dumps(
            {
                "requests": [e.requests for e in engines],
                "loads": [e.loads for e in engines],
                "load_seconds": [e.load_seconds for e in engines],
                "versions": [e.label for e in engines],
            }
        )
    return f"error: unknown command {' '.join(words)!r} (kill I, restart I, stats)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--engines", type=int, default=16)
    parser.add_argument("--release", default=SimSettings.release)
    parser.add_argument("--token-latency-ms", type=float, default=1.0)
    parser.add_argument("--mean-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--load-time-ms", type=float, default=0.0)
    parser.add_argument("--transfer-time-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve_forever(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
