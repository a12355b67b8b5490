"""Signals to a test container's processes, as a kubelet's cgroup handling delivers them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def signal_container(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
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
