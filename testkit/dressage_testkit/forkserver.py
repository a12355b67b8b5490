"""A fork server: one warm interpreter that has imported the heavy modules once (torch, the
engine) and forks each `python -m MODULE ...` command a test starts, instead of a fresh
interpreter importing them again.

Importing torch costs about 2.5 CPU-seconds on a small machine, and most of a test engine's
start is that import. A forked command runs exactly as `python -m MODULE ARGS` would
(`runpy.run_module(MODULE, run_name="__main__")`, `sys.argv` set as the interpreter sets it),
with the environment and working directory its caller gives and its output (stdout and
stderr) on a pipe its caller reads; it starts in about 0.2 CPU-seconds.

What differs from a fresh process, by construction: the modules the server preloaded are
already imported, so what a library reads from the environment at import time has the
server's value (the OpenMP runtime's `OMP_NUM_THREADS`: the engine sets its thread count itself,
`--threads`), and the hash seed and the `random` module's state are the server's. The server
runs single-threaded (no thread is running when it forks), with OpenBLAS at one thread.
Only tests use it; the product and the benchmarks start fresh processes.

Protocol, one Unix stream connection per command: the caller sends one JSON line
`{"argv": [...], "env": {...}, "cwd": ..., "new_session": false, "cpus": null}` with the file
its output goes to attached (`SCM_RIGHTS`: the write end of a pipe, or a log file), and a second
one when its standard error goes elsewhere; the server
answers `{"pid": N}` and, when the command exits, `{"exit": CODE}` (negative: killed by that
signal, as `subprocess` reports it), then closes the connection. `new_session` starts the
command in a session and process group of its own (`subprocess`'s `start_new_session`), `cpus`
pins it to those cores. A connection its caller closes first means the caller is gone: the
server kills its command (its process group, with `new_session`), as a child that dies with
its parent.

A process the server was not started by reaches it by its socket (`ForkClient`): the suite
names its server in `DRESSAGE_FORK_SERVER` (`FORK_SERVER_ENV`) and this module's `spawn_child`
as the launcher's spawner (`dressage.runner.processes.SPAWNER_ENV`, `fork_environment` sets
both), so a `dressage run` a test starts forks its engines and proxies there too.

    server = ForkServer(Path(tmp), preload=("torch", "dressage.engine.embedded.server"))
    process = server.spawn([sys.executable, "-m", "dressage", "engine", "serve", ...], env)
    ...
    server.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dressage.runner.processes import SPAWNER_ENV, Process, fresh_process

SOCKET_NAME = "forkserver.sock"
FORK_SERVER_ENV = "DRESSAGE_FORK_SERVER"
"""Names the socket of a fork server that commands of this interpreter may be forked from;
only the test suite sets it."""
SPAWNER = "dressage_testkit.forkserver:spawn_child"
"""`spawn_child` as `dressage.runner.processes.SPAWNER_ENV` names it."""
STARTUP_TIMEOUT_S = 120.0
"""How long a server may take to import its preloaded modules and listen."""


def fork_environment(socket_path: Path) -> dict[str, str]:
    """The variables that have the launcher (`dressage.runner.processes`) fork each `python -m`
    child from the server listening on `socket_path`."""
    return {SPAWNER_ENV: SPAWNER, FORK_SERVER_ENV: str(socket_path)}


def spawn_child(
    argv: Sequence[str], env: Mapping[str, str], *, cpus: Sequence[int] | None
) -> Process:
    """The suite's `dressage.runner.processes.Spawner`: a `python -m` command forked from the
    server `env` names in `FORK_SERVER_ENV`, in a session of its own; any other command, or
    every command when `env` names no server, a fresh process (`fresh_process`)."""
    server = ForkClient.for_command(argv, env)
    if server is None:
        return fresh_process(argv, env, cpus=cpus)
    return server.spawn(argv, env, new_session=True, cpus=cpus)


class ForkServerError(RuntimeError):
    """The fork server could not start a command, or went away while one ran."""


def python_module_of(argv: Sequence[str]) -> tuple[str, list[str]]:
    """`(module, args)` of a `python -m module args...` command line; ValueError for any other
    (the server runs modules of this interpreter only)."""
    if len(argv) < 3 or argv[1] != "-m" or Path(argv[0]).name not in _PYTHON_NAMES:
        raise ValueError(f"not a `python -m MODULE ...` command line: {list(argv)[:4]}")
    return argv[2], list(argv[3:])


_PYTHON_NAMES = {"python", "python3", Path(sys.executable).name}


class ForkedProcess:
    """A command the fork server started: the part of `subprocess.Popen`'s interface tests use
    (`pid`, `stdout`, `returncode`, `poll`, `wait`, `send_signal`, `terminate`, `kill`).

    Its exit code arrives on the connection to the server; signals go to its pid directly."""

    def __init__(
        self,
        pid: int,
        stdout: IO[str] | None,
        connection: socket.socket,
        stderr: IO[str] | None = None,
        pending: bytes = b"",
    ) -> None:
        """`pending`: what the server sent after the spawn's reply and was read with it (the
        exit line of a command that ended at once)."""
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self.stderr: IO[str] | None = stderr
        self.returncode: int | None = None
        self._connection = connection
        self._pending = pending
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._read_exit(timeout=0.0)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            code = self._read_exit(timeout=left)
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        # Dropped without being waited for: the connection goes quietly (the server then
        # kills the command, as it does when its caller dies).
        self._connection.close()

    def _read_exit(self, *, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            if not self._pending.endswith(b"\n"):
                self._connection.settimeout(timeout)
                try:
                    chunk = self._connection.recv(4096)
                except (TimeoutError, BlockingIOError):
                    return None
                if not chunk:
                    self._connection.close()
                    raise ForkServerError(f"the fork server went away while pid {self.pid} ran")
                self._pending += chunk
                if not self._pending.endswith(b"\n"):
                    return None
            message = json.loads(self._pending)
            self.returncode = int(message["exit"])
            self._connection.close()
            return self.returncode


class ForkClient:
    """A fork server reached by its socket path: one that another process started (the
    `FORK_SERVER_ENV` variable's value), or, as `ForkServer`, one this process starts."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> ForkClient | None:
        """The server `env` names in `FORK_SERVER_ENV`, None when it names none."""
        path = env.get(FORK_SERVER_ENV, "")
        return cls(Path(path)) if path else None

    @classmethod
    def for_command(cls, argv: Sequence[str], env: Mapping[str, str]) -> ForkClient | None:
        """The server `env` names, when it can run `argv` (a `python -m MODULE ...` command
        line); None when `argv` is to start as a fresh process."""
        try:
            python_module_of(argv)
        except ValueError:
            return None
        return cls.from_environment(env)

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        *,
        output: int | None = None,
        separate_stderr: bool = False,
        new_session: bool = False,
        cpus: Sequence[int] | None = None,
    ) -> ForkedProcess:
        """Start `argv` (a `python -m MODULE ...` command line) with exactly `env` as its
        environment, in `cwd` (default: this process's), its output on a pipe (`stdout`), or
        written to the file descriptor `output` (`stdout` is then None); with
        `separate_stderr` its standard error on a pipe of its own (`stderr`); with
        `new_session` in a session of its own; with `cpus` pinned to those cores.
        `ForkServerError` when the server cannot be reached or refuses."""
        python_module_of(argv)
        self._ready()
        if output is None:
            read_end, write_end = os.pipe()
        else:
            read_end, write_end = -1, os.dup(output)
        err_read, err_write = os.pipe() if separate_stderr else (-1, -1)
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                connection.connect(str(self.socket_path))
            except OSError as exc:
                raise ForkServerError(
                    f"no fork server listens on {self.socket_path}: {exc}"
                ) from exc
            request = {
                "argv": list(argv),
                "env": dict(env),
                "cwd": cwd or os.getcwd(),
                "new_session": new_session,
                "cpus": None if cpus is None else sorted(set(cpus)),
            }
            line = json.dumps(request).encode() + b"\n"
            socket.send_fds(connection, [line], [fd for fd in (write_end, err_write) if fd >= 0])
            for fd in (write_end, err_write):
                if fd >= 0:
                    os.close(fd)
            write_end = err_write = -1
            reply, rest = _read_line(connection)
            if "pid" not in reply:
                raise ForkServerError(f"the fork server refused {list(argv)[:4]}: {reply}")
        except BaseException:
            connection.close()
            for fd in (read_end, write_end, err_read, err_write):
                if fd >= 0:
                    os.close(fd)
            raise
        return ForkedProcess(
            int(reply["pid"]), _reader(read_end), connection, _reader(err_read), pending=rest
        )

    def _ready(self) -> None:
        """Make sure the server listens (a server another process started: nothing to do)."""


class ForkServer(ForkClient):
    """A fork server process, started on the first `spawn` (so a test session that starts no
    engine pays nothing) and stopped by `close`, which also kills what it still runs."""

    def __init__(self, directory: Path, *, preload: Sequence[str]) -> None:
        super().__init__(directory / SOCKET_NAME)
        self.directory = directory
        self.preload = tuple(preload)
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the server now (else the first `spawn` does), so that other processes can
        reach it by `socket_path`."""
        self._ensure_started()

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()  # the server kills what it runs and exits
        try:
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            pass
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)

    def _ready(self) -> None:
        self._ensure_started()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            self.socket_path.unlink(missing_ok=True)
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            log = (self.directory / "forkserver.log").open("ab")
            argv = [sys.executable, "-m", "dressage_testkit.forkserver_loop", str(self.socket_path)]
            with log:
                self._process = subprocess.Popen(
                    [*argv, *self.preload],
                    stdin=subprocess.PIPE,  # its end tells the server this process is gone
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not self.socket_path.exists():
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise ForkServerError(
                        f"the fork server did not start (exit {self._process.poll()}): "
                        + (self.directory / "forkserver.log").read_text()[-2000:]
                    )
                time.sleep(0.05)


def _reader(fd: int) -> IO[str] | None:
    """A text reader of the pipe end `fd` (None for -1, no pipe); the caller owns it."""
    return None if fd < 0 else open(fd, encoding="utf-8", errors="replace")


def _read_line(connection: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The server's first message on `connection`, and what arrived after it in the same reads
    (a command that ends at once has its exit line sent right behind its pid)."""
    data = b""
    while b"\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            raise ForkServerError("the fork server closed the connection")
        data += chunk
    line, _, rest = data.partition(b"\n")
    reply: dict[str, Any] = json.loads(line)
    return reply, rest
