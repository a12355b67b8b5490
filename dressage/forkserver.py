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
its output goes to attached (`SCM_RIGHTS`: the write end of a pipe, or a log file); the server
answers `{"pid": N}` and, when the command exits, `{"exit": CODE}` (negative: killed by that
signal, as `subprocess` reports it), then closes the connection. `new_session` starts the
command in a session and process group of its own (`subprocess`'s `start_new_session`), `cpus`
pins it to those cores. A connection its caller closes first means the caller is gone: the
server kills its command (its process group, with `new_session`), as a child that dies with
its parent.

A process the server was not started by reaches it by its socket (`ForkClient`): the suite
names its server in `DRESSAGE_FORK_SERVER` (`FORK_SERVER_ENV`), and a `dressage run` a test
starts forks its engines and proxies there too (`dressage.runner.processes`).

    server = ForkServer(Path(tmp), preload=("torch", "dressage.engine.server"))
    process = server.spawn([sys.executable, "-m", "dressage", "engine", "serve", ...], env)
    ...
    server.close()
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SOCKET_NAME = "forkserver.sock"
FORK_SERVER_ENV = "DRESSAGE_FORK_SERVER"
"""Names the socket of a fork server that commands of this interpreter may be forked from;
only the test suite sets it."""
STARTUP_TIMEOUT_S = 120.0
"""How long a server may take to import its preloaded modules and listen."""


class ForkServerError(RuntimeError):
    """The fork server could not start a command, or went away while one ran."""


def python_module_of(argv: Sequence[str]) -> tuple[str, list[str]]:
    """`(module, args)` of a `python -m module args...` command line; ValueError for any other
    (the server runs modules of this interpreter only)."""
    if len(argv) < 3 or argv[1] != "-m" or Path(argv[0]).name not in _PYTHON_NAMES:
        raise ValueError(f"not a `python -m MODULE ...` command line: {list(argv)[:4]}")
    return argv[2], list(argv[3:])


_PYTHON_NAMES = {"python", "python3", Path(sys.executable).name}


def forkable(argv: Sequence[str]) -> bool:
    """Whether a fork server can run `argv` (a `python -m MODULE ...` command line)."""
    try:
        python_module_of(argv)
    except ValueError:
        return False
    return True


class ForkedProcess:
    """A command the fork server started: the part of `subprocess.Popen`'s interface tests use
    (`pid`, `stdout`, `returncode`, `poll`, `wait`, `send_signal`, `terminate`, `kill`).

    Its exit code arrives on the connection to the server; signals go to its pid directly."""

    def __init__(self, pid: int, stdout: IO[str] | None, connection: socket.socket) -> None:
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self.returncode: int | None = None
        self._connection = connection
        self._pending = b""
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


class ForkServer:
    """A fork server process, started on the first `spawn` (so a test session that starts no
    engine pays nothing) and stopped by `close`, which also kills what it still runs."""

    def __init__(self, directory: Path, *, preload: Sequence[str]) -> None:
        self.directory = directory
        self.preload = tuple(preload)
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        *,
        output: int | None = None,
        new_session: bool = False,
        cpus: Sequence[int] | None = None,
    ) -> ForkedProcess:
        """Start `argv` (a `python -m MODULE ...` command line) with exactly `env` as its
        environment, in `cwd` (default: this process's), its output on a pipe (`stdout`), or
        written to the file descriptor `output` (`stdout` is then None)."""
        python_module_of(argv)
        self._ensure_started()
        return spawn_at(
            self.socket_path, argv, env, cwd, output=output, new_session=new_session, cpus=cpus
        )

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

    def _ensure_started(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            self.socket_path.unlink(missing_ok=True)
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            log = (self.directory / "forkserver.log").open("ab")
            argv = [sys.executable, "-m", "dressage.forkserver", str(self.socket_path)]
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


class ForkClient:
    """A fork server that another process started, reached by its socket path (the
    `FORK_SERVER_ENV` variable's value): `spawn` as `ForkServer.spawn`."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> ForkClient | None:
        """The server `env` names in `FORK_SERVER_ENV`, None when it names none."""
        path = env.get(FORK_SERVER_ENV, "")
        return cls(Path(path)) if path else None

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        *,
        output: int | None = None,
        new_session: bool = False,
        cpus: Sequence[int] | None = None,
    ) -> ForkedProcess:
        return spawn_at(
            self.socket_path, argv, env, cwd, output=output, new_session=new_session, cpus=cpus
        )


def spawn_at(
    socket_path: Path,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None = None,
    *,
    output: int | None = None,
    new_session: bool = False,
    cpus: Sequence[int] | None = None,
) -> ForkedProcess:
    """Ask the server listening on `socket_path` to fork `argv` (see `ForkServer.spawn`);
    `ForkServerError` when it cannot be reached or refuses."""
    python_module_of(argv)
    if output is None:
        read_end, write_end = os.pipe()
    else:
        read_end, write_end = -1, os.dup(output)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            connection.connect(str(socket_path))
        except OSError as exc:
            raise ForkServerError(f"no fork server listens on {socket_path}: {exc}") from exc
        request = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd or os.getcwd(),
            "new_session": new_session,
            "cpus": None if cpus is None else sorted(set(cpus)),
        }
        line = json.dumps(request).encode() + b"\n"
        socket.send_fds(connection, [line], [write_end])
        os.close(write_end)
        write_end = -1
        reply = _read_line(connection)
        if "pid" not in reply:
            raise ForkServerError(f"the fork server refused {list(argv)[:4]}: {reply}")
    except BaseException:
        connection.close()
        if read_end >= 0:
            os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
        raise
    stdout = (
        None if read_end < 0 else open(read_end, encoding="utf-8", errors="replace")  # noqa: SIM115 (the caller owns it)
    )
    return ForkedProcess(int(reply["pid"]), stdout, connection)


def _read_line(connection: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            raise ForkServerError("the fork server closed the connection")
        data += chunk
    reply: dict[str, Any] = json.loads(data)
    return reply


# --- the server process


@dataclass
class _Child:
    connection: socket.socket
    """Its caller's connection (open until the child's exit is reported)."""
    pidfd: int
    group: bool = False
    """It leads a process group of its own (`new_session`): killed as a group."""
    caller_present: bool = True
    """False once the caller closed its end: nobody waits for the exit code."""


class _Server:
    """The server's loop: accept requests, fork, report exits. Single-threaded, so a fork
    copies a process in which no other thread holds a lock."""

    def __init__(self, path: str) -> None:
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path + ".tmp")
        self.listener.listen(64)
        os.rename(path + ".tmp", path)  # the caller waits for the path: listening by then
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", 0))
        # Stdin is a pipe from the process that started the server: its end (that process
        # exited, even killed) ends the server, so no server outlives its test session.
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, ("parent", 0))
        self.children: dict[int, _Child] = {}

    def serve(self) -> None:
        """Serve until the parent's end of stdin closes."""
        while True:
            for key, _ in self.selector.select():
                kind, pid = key.data
                if kind == "parent":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif kind == "accept":
                    connection, _ = self.listener.accept()
                    self._start(connection)
                elif kind == "exited":
                    self._reap(pid)
                else:
                    self._caller_gone(pid)

    def stop(self) -> None:
        """Kill every command still running and report each one's exit to its caller."""
        for pid, child in list(self.children.items()):
            with contextlib.suppress(ProcessLookupError):
                if child.group:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            self._reap(pid)

    def _start(self, connection: socket.socket) -> None:
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 1)
            while not message.endswith(b"\n"):
                chunk = connection.recv(1 << 20)
                if not chunk:
                    raise ValueError("request ended before its newline")
                message += chunk
            if len(fds) != 1:
                raise ValueError("a request carries exactly one file descriptor, its output")
            request = parse_request(message)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
            connection.close()
            for fd in fds:
                os.close(fd)
            return
        output = fds[0]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(request, output, inherited=self._own_fds(connection))
        os.close(output)
        child = _Child(connection, os.pidfd_open(pid), group=request.new_session)
        self.children[pid] = child
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        self.selector.register(child.pidfd, selectors.EVENT_READ, ("exited", pid))
        self.selector.register(connection, selectors.EVENT_READ, ("caller", pid))

    def _own_fds(self, connection: socket.socket) -> list[int]:
        fds = [self.listener.fileno(), connection.fileno(), self.selector.fileno()]
        for child in self.children.values():
            fds += [child.connection.fileno(), child.pidfd]
        return [fd for fd in fds if fd >= 0]

    def _reap(self, pid: int) -> None:
        child = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        if child.caller_present:
            self.selector.unregister(child.connection)
            with contextlib.suppress(OSError):
                exit_code = os.waitstatus_to_exitcode(status)
                child.connection.sendall(json.dumps({"exit": exit_code}).encode() + b"\n")
        child.connection.close()

    def _caller_gone(self, pid: int) -> None:
        child = self.children[pid]
        try:
            data = child.connection.recv(4096)
        except OSError:
            data = b""
        if data:
            return  # a caller says nothing after its request; what it sends is ignored
        child.caller_present = False
        self.selector.unregister(child.connection)
        with contextlib.suppress(ProcessLookupError):
            if child.group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Request:
    """One command to fork (see the module doc's protocol)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    new_session: bool = False
    cpus: list[int] | None = None


def parse_request(message: bytes) -> Request:
    """A request's fields; ValueError naming the field at fault."""
    request = json.loads(message)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    argv, env, cwd = request.get("argv"), request.get("env"), request.get("cwd")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv: a list of strings")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("env: an object of strings")
    if not isinstance(cwd, str):
        raise ValueError("cwd: a string")
    new_session = request.get("new_session", False)
    if not isinstance(new_session, bool):
        raise ValueError("new_session: true or false")
    cpus = request.get("cpus")
    if cpus is not None and (
        not isinstance(cpus, list)
        or not cpus
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus)
    ):
        raise ValueError("cpus: null or a non-empty list of core numbers")
    python_module_of(argv)
    return Request(argv, env, cwd, new_session, cpus)


def _run_child(request: Request, output: int, *, inherited: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` with the request's environment,
    working directory, output, session and cores, run it, and exit with its code. Never
    returns."""
    code = 1
    argv, env, cwd = request.argv, request.env, request.cwd
    try:
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        if request.new_session:
            os.setsid()
        if request.cpus is not None:
            os.sched_setaffinity(0, request.cpus)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(devnull)
        os.close(output)
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(line_buffering=True, write_through=True)
        module, args = python_module_of(argv)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = [module, *args]  # run_module sets argv[0] to the module's file
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            # As the interpreter does: the traceback, then die of SIGINT itself.
            traceback.print_exc()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code & 0xFF)


def main(argv: Sequence[str]) -> int:
    """`python -m dressage.forkserver SOCKET [MODULE ...]`: preload the modules, then serve."""
    if not argv:
        print("usage: python -m dressage.forkserver SOCKET [MODULE ...]", file=sys.stderr)
        return 2
    path, preload = argv[0], argv[1:]
    for name in preload:
        importlib.import_module(name)
    server = _Server(path)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve()
    finally:
        server.stop()
        with contextlib.suppress(OSError):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
