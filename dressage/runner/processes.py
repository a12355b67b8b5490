"""Child processes of a local run: start, wait for a readiness line, stop cleanly.

Each child runs in its own process group (so a terminal's Ctrl-C reaches only the runner, which
then stops the children) with its output written to a log file and scanned for a readiness
marker such as `engine ready on http://...`. `stop()` sends SIGTERM to the group, waits, and
sends SIGKILL to whatever is left; `stop_together` does the same for several children with one
shared wait, so their shutdowns overlap.

A child is a fresh interpreter (`fresh_process`) unless its environment names another way to
start it: `DRESSAGE_SPAWNER=module:callable` (`SPAWNER_ENV`), a `Spawner` imported when a child
starts. Whatever starts it, a child runs in a session of its own, on its cores, with its output
on one pipe, and dies with the runner (Linux's `PR_SET_PDEATHSIG` for a fresh one).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol, cast

import dressage

PROJECT_ROOT = Path(dressage.__file__).resolve().parents[1]
SPAWNER_ENV = "DRESSAGE_SPAWNER"
"""Names the `Spawner` that starts a child instead of `fresh_process`, as `module:callable`;
read from the child's environment, imported only when set."""


class Process(Protocol):
    """What the launcher uses of a started process: `subprocess.Popen`'s interface."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> IO[str] | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class Spawner(Protocol):
    """Starts `argv` with exactly `env` as its environment, in a session and process group of
    its own (its pid is its group's id), pinned to `cpus` (None: this process's cores), its
    stdout and stderr on one text pipe (`Process.stdout`), its stdin empty; it ends when the
    process that started it dies."""

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], *, cpus: Sequence[int] | None
    ) -> Process: ...


class SpawnerNotFound(RuntimeError):
    """`DRESSAGE_SPAWNER` names no callable that can be imported."""


TAIL_LINES = 40
"""How many of a failed child's last output lines its error shows."""


class ChildFailed(RuntimeError):
    """A child exited or stayed silent before printing its readiness line."""


class ChildProcess:
    """One child process: its output lines kept in `output` and appended to `log_path` (None:
    no log file)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path | None,
        env: Mapping[str, str] | None = None,
        cpus: Sequence[int] | None = None,
    ) -> None:
        """`env`: the child's whole environment (None: this process's); `cpus`: the cores the
        child (and every thread it starts) is pinned to."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.cpus = None if cpus is None else sorted(set(cpus))
        self.process: Process | None = None
        self.output: list[str] = []
        """Every line the child printed so far (stdout and stderr), without line ends."""
        self._new_line = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("a", encoding="utf-8")
        try:
            self.process = spawner_of(env)(self.argv, env, cpus=self.cpus)
        except BaseException:
            if log is not None:
                log.close()
            raise
        self._reader = threading.Thread(
            target=self._drain, args=(self.process.stdout, log), name=f"{self.name}-output"
        )
        self._reader.daemon = True
        self._reader.start()

    def _drain(self, stream: IO[str] | None, log: IO[str] | None) -> None:
        assert stream is not None
        with contextlib.ExitStack() as closing:
            closing.enter_context(stream)
            if log is not None:
                closing.enter_context(log)
            for line in stream:
                if log is not None:
                    log.write(line)
                    log.flush()
                self.output.append(line.rstrip("\n"))
                self._new_line.set()
        self._new_line.set()

    async def wait_for(self, marker: str, deadline_s: float) -> str:
        """The rest of the first output line starting with `marker` (e.g. the URL);
        `ChildFailed` when the child ends, or `deadline_s` passes, without one."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        seen = 0
        while True:
            found, seen = self._look_for(marker, seen, deadline_s, loop.time() >= end)
            if found is not None:
                return found
            await asyncio.sleep(0.05)

    def wait_for_blocking(self, marker: str, deadline_s: float) -> str:
        """`wait_for` for a caller without an event loop: blocks this thread until then."""
        end = time.monotonic() + deadline_s
        seen = 0
        while True:
            found, seen = self._look_for(marker, seen, deadline_s, time.monotonic() >= end)
            if found is not None:
                return found
            self._new_line.wait(timeout=0.05)
            self._new_line.clear()

    def _look_for(
        self, marker: str, seen: int, deadline_s: float, late: bool
    ) -> tuple[str | None, int]:
        """The rest of the first line after the `seen` first ones that starts with `marker`
        (None: none yet), and how many lines are seen now; `ChildFailed` when the child has
        ended with none, or when it is `late`."""
        while seen < len(self.output):
            line = self.output[seen]
            seen += 1
            if line.startswith(marker):
                return line[len(marker) :].strip(), seen
        exited = self.process is None or self.process.poll() is not None
        reader_done = self._reader is None or not self._reader.is_alive()
        if exited and reader_done and seen >= len(self.output):
            raise ChildFailed(self._failure(f"exited before printing {marker!r}"))
        if late:
            raise ChildFailed(self._failure(f"did not print {marker!r} in {deadline_s:.0f}s"))
        return None, seen

    def _failure(self, what: str) -> str:
        code = None if self.process is None else self.process.poll()
        tail = "\n".join(f"  | {line}" for line in self.output[-TAIL_LINES:])
        where = "" if self.log_path is None else f"; log {self.log_path}"
        return f"{self.name} {what} (exit code {code}){where}:\n{tail}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the child's process group, then SIGKILL after `grace_s`; its exit code."""
        self.terminate()
        return self.reap(time.monotonic() + grace_s)

    def terminate(self) -> None:
        """SIGTERM the child's process group if it still runs (`reap` then waits for it)."""
        if self.process is not None and self.process.poll() is None:
            self._signal(self.process, signal.SIGTERM)

    def reap(self, deadline: float) -> int | None:
        """Wait for the child until `deadline` (`time.monotonic()`), SIGKILL its group if it
        is still there then; its exit code."""
        process = self.process
        if process is None:
            return None
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._signal(process, signal.SIGKILL)
            process.wait(timeout=10.0)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return process.returncode

    @staticmethod
    def _signal(process: Process, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def fresh_process(
    argv: Sequence[str], env: Mapping[str, str], *, cpus: Sequence[int] | None = None
) -> subprocess.Popen[str]:
    """The default `Spawner`: `argv` as a fresh process (`subprocess.Popen`)."""
    return subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=dict(env),
        start_new_session=True,
        preexec_fn=_child_setup(cpus),
    )


def spawner_of(env: Mapping[str, str]) -> Spawner:
    """The `Spawner` `env` names in `SPAWNER_ENV`, `fresh_process` when it names none;
    `SpawnerNotFound` when the name cannot be imported."""
    name = env.get(SPAWNER_ENV, "")
    return _import_spawner(name) if name else fresh_process


@functools.cache
def _import_spawner(name: str) -> Spawner:
    module, _, attribute = name.partition(":")
    try:
        if not module or not attribute:
            raise ValueError("expected module:callable")
        spawner = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SpawnerNotFound(
            f"{SPAWNER_ENV}={name!r} names no importable spawner (module:callable): {exc}"
        ) from exc
    if not callable(spawner):
        raise SpawnerNotFound(f"{SPAWNER_ENV}={name!r} names {spawner!r}, not a callable")
    return cast(Spawner, spawner)


def stop_together(children: Sequence[ChildProcess], grace_s: float = 10.0) -> None:
    """Stop `children` at once: SIGTERM to all, then wait for each within one shared `grace_s`
    and SIGKILL whatever is left. Each child's own shutdown (closing its server, its
    connections) runs beside the others', so stopping N children takes about as long as the
    slowest, not their sum."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.reap(deadline)


def pin_this_process(cpus: Sequence[int]) -> None:
    """Pin every thread of this process, and so every thread it starts later, to `cpus`.

    Linux sets affinity per thread: threads already running (a metrics server, an executor)
    are pinned one by one from `/proc/self/task`. Raises `ValueError` naming cores this machine
    does not let the process use."""
    wanted = set(cpus)
    unknown = sorted(wanted - os.sched_getaffinity(0))
    if unknown:
        raise ValueError(f"cpus {unknown} are not available here (usable: {available_cpus()})")
    os.sched_setaffinity(0, wanted)
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), wanted)


def available_cpus() -> list[int]:
    """The cores this process may run on."""
    return sorted(os.sched_getaffinity(0))


def _child_setup(cpus: Sequence[int] | None) -> Callable[[], None]:
    def setup() -> None:
        _die_with_parent()
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    return setup


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM the child when the runner dies, even by SIGKILL (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def python_module(*args: str) -> list[str]:
    """argv running `python -m dressage ARGS` with this interpreter."""
    return [sys.executable, "-m", "dressage", *args]
