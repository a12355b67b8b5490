"""The engine pod's `preStop` hook: ask the proxy to drain this engine and wait for its answer.

The kubelet runs this file's source with the engine image's Python (`python -c`, see
`children.engine.engine_lifecycle`), so it uses the standard library only and any SGLang
image runs it. With several proxy replicas (`DRESSAGE_PROXY_URL` lists them, comma-separated,
or names their headless Service as `dns+http://HOST:PORT`, resolved here to the ready
replicas) every replica must drain its own turns on the engine: the hook first marks the
engine draining on each (`"abort": false`, so no replica routes a new turn there and each
knows the coming abort for a drain's), then drains it on all at once. A failure (a proxy gone,
the engine no longer listed) is printed and the pod stops anyway: the hook never holds a
termination beyond its bound (5 s to mark it draining, then the drain's and 5 s for its
answer).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

ENGINE_URL_ENV = "DRESSAGE_ENGINE_URL"
"""The engine's own URL as the proxy lists it (the engine this hook drains)."""
PROXY_URL_ENV = "DRESSAGE_PROXY_URL"
"""The proxy replicas: URLs, comma-separated, or `dns+http://HOST:PORT` of their Service."""
PROXY_TOKEN_ENV = "DRESSAGE_PROXY_TOKEN"
"""The proxy's bearer token, when it requires one."""
DRAIN_PATH = "/dressage/engines/drain"

DRAIN_TIMEOUT_SECONDS = 20
"""The longest the hook asks the proxy's drain (`dressage.proxy.drain`) to take: it answers
once the engine's generations came back aborted, which takes one decode step and a reply,
well under a second; the bound keeps a stuck drain from using up the grace period."""
ANSWER_MARGIN_SECONDS = 5
"""How much longer than the drain's bound the hook waits for the proxy's answer."""
MARK_TIMEOUT_SECONDS = 5
"""The bound on marking the engine draining on every replica (several replicas only)."""

Body = dict[str, Any]
Post = Callable[[str, Body, float], str]
"""Send one drain request (proxy URL, JSON body, timeout in seconds); the answer's text.
Raises on any failure."""
Resolve = Callable[[str, int], set[str]]
"""The addresses a host name resolves to (host, port)."""


def resolve_addresses(host: str, port: int) -> set[str]:
    return {str(i[4][0]) for i in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}


def proxy_urls(
    value: str, resolve: Resolve = resolve_addresses, err: TextIO = sys.stderr
) -> list[str]:
    """The proxy replicas `DRESSAGE_PROXY_URL` names: its comma-separated URLs, or, for
    `dns+SCHEME://HOST:PORT`, one URL per address the host resolves to (none when it does not
    resolve: the failure is printed)."""
    proxies = [u.strip().rstrip("/") for u in value.split(",") if u.strip()]
    if not proxies or not proxies[0].startswith("dns+"):
        return proxies
    scheme, _, authority = proxies[0][4:].partition("://")
    host, _, port = authority.rpartition(":")
    try:
        found = resolve(host, int(port))
    except (OSError, ValueError) as exc:
        print("cannot resolve the proxy replicas:", exc, file=err)
        return []
    # An IPv6 address goes in brackets in a URL.
    return sorted(
        f"{scheme}://[{a}]:{port}" if ":" in a else f"{scheme}://{a}:{port}" for a in found
    )


def request_headers(token: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = "Bearer " + token
    return headers


def http_post(headers: Mapping[str, str]) -> Post:
    """A `Post` over HTTP with `headers`."""

    def post(proxy: str, body: Body, timeout: float) -> str:
        request = urllib.request.Request(
            proxy + DRAIN_PATH, json.dumps(body).encode(), dict(headers)
        )
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return str(reply.read().decode()[:500])

    return post


def every(
    proxies: Sequence[str],
    body: Body,
    timeout: float,
    post: Post,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> None:
    """Send `body` to every replica at once and wait for all; each answer or failure is
    printed, none is raised."""
    said = "drained:" if body.get("abort", True) else "marked:"

    def call(proxy: str) -> None:
        try:
            print(proxy, said, post(proxy, body, timeout), file=out)
        except Exception as exc:
            print(proxy, "drain failed:", exc, file=err)

    threads = [threading.Thread(target=call, args=(p,)) for p in proxies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def drain(
    engine: str,
    proxies: Sequence[str],
    post: Post,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> None:
    """Drain `engine` on every proxy replica: marked draining on all first when there are
    several, then drained on all."""
    if len(proxies) > 1:
        every(proxies, {"url": engine, "abort": False}, MARK_TIMEOUT_SECONDS, post, out, err)
    body: Body = {"url": engine, "timeout_s": DRAIN_TIMEOUT_SECONDS}
    every(proxies, body, DRAIN_TIMEOUT_SECONDS + ANSWER_MARGIN_SECONDS, post, out, err)


def main(environ: Mapping[str, str] = os.environ) -> None:
    post = http_post(request_headers(environ.get(PROXY_TOKEN_ENV)))
    drain(environ[ENGINE_URL_ENV], proxy_urls(environ[PROXY_URL_ENV]), post)


if __name__ == "__main__":
    main()
