"""The fork server's own process (`python -m dressage_testkit.forkserver_loop SOCKET [MODULE
...]`): its
loop, which accepts requests, forks and reports exits, and what a forked child does to become
the command it was asked for. The protocol and the callers' side are
`dressage_testkit.forkserver`."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from dressage_testkit.forkserver import python_module_of


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
        self.base_path = base_sys_path(sys.path, os.environ.get("PYTHONPATH", ""))
        """This process's `sys.path` without what its own working directory and `PYTHONPATH`
        put there: the part every command's path ends with."""
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
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 2)
            while not message.endswith(b"\n"):
                chunk = connection.recv(1 << 20)
                if not chunk:
                    raise ValueError("request ended before its newline")
                message += chunk
            if len(fds) not in (1, 2):
                raise ValueError(
                    "a request carries one file descriptor, its output, or two: its output "
                    "and its standard error"
                )
            request = parse_request(message)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
            connection.close()
            for fd in fds:
                os.close(fd)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(
                request, fds[0], fds[-1], self.base_path, inherited=self._own_fds(connection)
            )
        for fd in fds:
            os.close(fd)
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


def _run_child(
    request: Request, output: int, errors: int, base_path: list[str], *, inherited: list[int]
) -> None:
    """In the forked child: become `python -m MODULE ARGS` with the request's environment,
    working directory (and the `sys.path` they give a fresh interpreter), output (standard
    error to `errors`, which may be `output`), session and cores, run it, and exit with its
    code as the interpreter would: after joining the threads it leaves running and running its
    `atexit` functions. Never returns."""
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
        os.dup2(errors, 2)
        os.close(devnull)
        os.close(output)
        if errors != output:
            os.close(errors)
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(line_buffering=True, write_through=True)
        module, args = python_module_of(argv)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.path[:] = child_sys_path(base_path, os.getcwd(), env.get("PYTHONPATH", ""))
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
        _shut_down()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code & 0xFF)


def _shut_down() -> None:
    """What the interpreter does before it exits: wait for the non-daemon threads, then run
    the `atexit` functions."""
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()


def base_sys_path(path: Sequence[str], pythonpath: str) -> list[str]:
    """An interpreter's `sys.path` (started with `-m`: its first entry is its working
    directory) without the entries its working directory and `PYTHONPATH` put there."""
    own = {entry for entry in pythonpath.split(os.pathsep) if entry}
    return [entry for entry in path[1:] if entry not in own]


def child_sys_path(base: Sequence[str], cwd: str, pythonpath: str) -> list[str]:
    """The `sys.path` a fresh `python -m` would start with in `cwd` with `PYTHONPATH`
    `pythonpath`: the working directory, the `PYTHONPATH` entries, then `base`."""
    return [cwd, *(entry for entry in pythonpath.split(os.pathsep) if entry), *base]


def main(argv: Sequence[str]) -> int:
    """`python -m dressage_testkit.forkserver_loop SOCKET [MODULE ...]`: preload the modules, then
    serve."""
    if not argv:
        print(
            "usage: python -m dressage_testkit.forkserver_loop SOCKET [MODULE ...]", file=sys.stderr
        )
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
