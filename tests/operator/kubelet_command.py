"""A container's command line as it runs on the test kubelet: its own ports become loopback
ports, `--host 0.0.0.0` loopback, and the images' programs (`python`, `torchrun`, SGLang's
`python -m sglang.launch_server`) this interpreter or the embedded engine."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .kubelet_engine import sglang_as_embedded

PORT_FLAGS = ("--port", "--master-port")
"""Flags whose value is one of the container's own ports."""


def local_ports(argv: list[str], own: set[int], loopback: Callable[[int], int]) -> list[str]:
    """`argv` with every port flag naming one of `own` (the container's `containerPort`s,
    as `--port N` or `--port=N`) set to its loopback port, and `--host 0.0.0.0` to loopback."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        before = argv[i - 1] if i else ""
        flag, eq, value = arg.partition("=")
        if before in PORT_FLAGS and arg.isdigit() and int(arg) in own:
            arg = str(loopback(int(arg)))
        elif eq and flag in PORT_FLAGS and value.isdigit() and int(value) in own:
            arg = f"{flag}={loopback(int(value))}"
        elif before == "--host" and arg == "0.0.0.0":
            arg = "127.0.0.1"
        out.append(arg)
    return out


def local_program(argv: list[str], release: Callable[[], str]) -> list[str]:
    """`argv` with its program replaced by what runs it here; `release` names the SGLang
    release an engine container plays (asked only for an engine)."""
    if argv[:3] == ["python", "-m", "sglang.launch_server"]:
        return [sys.executable, *sglang_as_embedded(argv[3:], release())]
    if argv and argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv and argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv
