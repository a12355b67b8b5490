"""The test kubelet's probes: one `httpGet` or `tcpSocket` check, with its declared timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

Obj = dict[str, Any]


@dataclass(frozen=True)
class ProbeResult:
    pod: str
    uid: str
    container: str
    kind: str
    """`startupProbe`, `livenessProbe` or `readinessProbe`."""
    ok: bool
    seconds: float
    timeout_s: float
    at: float
    """`time.monotonic()` when the probe started."""
    detail: str
    body: str = ""


def run_probe(
    pod: str, uid: str, container: Obj, kind: str, probe: Obj, loopback: Callable[[int], int]
) -> ProbeResult:
    """Run one probe of `container` in `pod`; `loopback` maps a container port to the
    loopback port the pod's process listens on."""
    timeout = float(probe.get("timeoutSeconds", 1))
    named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    started = time.monotonic()
    ok, detail, body = False, "", ""
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = get["port"]
        port = named[port] if isinstance(port, str) else port
        url = f"http://127.0.0.1:{loopback(port)}{get.get('path', '/')}"
        try:
            reply = httpx.get(url, timeout=timeout)
            ok = 200 <= reply.status_code < 400
            detail, body = f"HTTP {reply.status_code}", reply.text[:500]
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__}: {exc}"
    elif "tcpSocket" in probe:
        port = probe["tcpSocket"]["port"]
        port = named[port] if isinstance(port, str) else port
        try:
            with socket.create_connection(("127.0.0.1", loopback(port)), timeout=timeout):
                ok, detail = True, "connected"
        except OSError as exc:
            detail = f"{type(exc).__name__}: {exc}"
    else:
        raise AssertionError(f"{pod}: unemulated probe {probe}")
    return ProbeResult(
        pod=pod,
        uid=uid,
        container=container["name"],
        kind=kind,
        ok=ok,
        seconds=time.monotonic() - started,
        timeout_s=timeout,
        at=started,
        detail=detail,
        body=body,
    )
