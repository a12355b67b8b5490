"""Container lifecycle hooks in the test kubelet: a `preStop` `exec` hook runs on a graceful
pod delete, before the container's SIGTERM, as a kubelet runs it.

Kubernetes (`pkg/kubelet/kuberuntime/kuberuntime_container.go`, `killContainer`): when a pod
is deleted gracefully, each running container's `preStop` hook runs first, inside the
container (its environment, its network), within the pod's
`terminationGracePeriodSeconds`; the container then gets SIGTERM, and SIGKILL once the grace
period is over. A hook that fails is logged and the termination goes on; a container that is
no longer running (a failed pod, an eviction that killed it) runs no hook. The hook's command
line and environment are those the container started with: the pod may already have left the
API when the kubelet stops it (the emulation deletes at once), but its names resolved then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_GRACE_PERIOD_S = 30.0
"""`terminationGracePeriodSeconds` when a pod does not set it (the API server's default)."""
SIGTERM_WAIT_S = 10.0
"""How long a deleted pod's processes get after SIGTERM before SIGKILL: capped below the grace
period, so a process that ignores SIGTERM costs a test seconds, not the rest of its pod's."""


@dataclass(frozen=True)
class HookResult:
    """One hook run."""

    pod: str
    container: str
    kind: str
    exit_code: int | None
    """None: still running when the grace period ran out (then killed)."""
    seconds: float
    output: str


def pre_stop_command(container: dict[str, Any]) -> list[str] | None:
    """The container's `preStop` `exec` command (None without one). An `httpGet` or `sleep`
    hook is refused: no pod of the operator's declares one, and running nothing in its place
    would hide what it should have done."""
    hook = (container.get("lifecycle") or {}).get("preStop")
    if hook is None:
        return None
    if set(hook) != {"exec"}:
        raise AssertionError(f"the test kubelet runs exec preStop hooks only, not {sorted(hook)}")
    command: list[str] = list(hook["exec"]["command"])
    return command


def pre_stop_argv(container: dict[str, Any]) -> dict[str, Any] | None:
    """A stand-in container whose command is the `preStop` hook's (None without one), for the
    kubelet to resolve as it resolves the container's own command (same environment, ports and
    names)."""
    command = pre_stop_command(container)
    if command is None:
        return None
    return {**container, "command": command, "args": []}


def grace_period_s(pod: dict[str, Any]) -> float:
    """The pod's termination grace period in seconds."""
    value = pod.get("spec", {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_PERIOD_S if value is None else float(value)


def run_hook(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: Path,
    log: Path,
    timeout_s: float,
    pod: str,
    container: str,
) -> HookResult:
    """Run one hook to its end, or kill it after `timeout_s`; its output goes to `log`."""
    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            _kill(process)
            code = None
    return HookResult(
        pod,
        container,
        "preStop",
        code,
        time.monotonic() - started,
        log.read_text(errors="replace")[-2000:],
    )


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a hook that outlived the grace period, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
