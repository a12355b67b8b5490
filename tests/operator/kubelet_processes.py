"""A test container's main process: how it starts (fresh, or forked from the suite's warm fork
server), and the signals a kubelet's cgroup handling delivers to it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from dressage.forkserver import ForkClient, ForkedProcess

Process = subprocess.Popen[bytes] | ForkedProcess
"""A container's main process: a fresh one, or one forked from the suite's fork server."""


def start_container(argv: list[str], env: dict[str, str], cwd: Path, output: int) -> Process:
    """Start a container's command with exactly `env`, in `cwd`, its output written to the file
    descriptor `output`, in a session of its own. A `python -m` command is forked from the
    suite's warm server when the environment names one (tests/engine_forks.py), so an engine or
    a torchrun launcher starts without importing torch again."""
    server = ForkClient.for_command(argv, os.environ)
    if server is not None:
        return server.spawn(argv, env, str(cwd), output=output, new_session=True)
    return subprocess.Popen(
        argv,
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def signal_container(process: Process, sig: signal.Signals) -> None:
    """Signal a running container. SIGTERM goes to the container's process group (its main
    process and what it did not detach); SIGKILL, SIGSTOP and SIGCONT to every process the
    container started, detached ones too (torchrun starts its workers in sessions of their
    own), as a container's cgroup is killed or frozen whole."""
    if process.poll() is not None:
        return
    pid = process.pid
    if sig == signal.SIGTERM:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
            os.killpg(pid, signal.SIGCONT)  # a frozen process acts on it once continued
        return
    for member in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents first (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, i = [pid], 0
    while i < len(tree):
        tree.extend(children.get(tree[i], []))
        i += 1
    return tree
