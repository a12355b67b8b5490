"""`dressage_testkit.forkserver`: a command forked from the warm server runs as `python -m MODULE`
would, with its caller's argv, environment and working directory, its output on its caller's
pipe, and its exit reported as `subprocess` reports one; a command whose caller went away, or
whose server closed, is killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dressage_testkit import forkserver
from dressage_testkit.engine import engines_forked_from, start_engine
from dressage_testkit.forkserver import (
    FORK_SERVER_ENV,
    ForkClient,
    ForkedProcess,
    ForkServer,
    ForkServerError,
    python_module_of,
)
from dressage_testkit.processes import exited_within

from dressage.engine import EngineClient
from tests.integration.engine_support import greedy, prompt_for

PROBE = [sys.executable, "-m", "tests.forkserver_probe"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("fs"), preload=("json",))
    yield server
    server.close()


def read_all(process: ForkedProcess) -> list[str]:
    assert process.stdout is not None
    with process.stdout:
        return process.stdout.read().splitlines()


def test_a_forked_command_runs_with_its_callers_argv_env_and_cwd(
    server: ForkServer, tmp_path: Path
) -> None:
    process = server.spawn([*PROBE, "a b", "exit", "3"], {"PROBE": "x"}, cwd=str(tmp_path))
    lines = read_all(process)
    assert process.wait(timeout=30) == 3
    seen = json.loads(lines[0])
    assert seen["argv"][1:] == ["a b", "exit", "3"]
    assert seen["argv"][0].endswith("forkserver_probe.py")
    assert seen["cwd"] == str(tmp_path)
    assert seen["probe"] == "x"
    assert seen["env_keys"] == ["PROBE"]  # exactly the caller's environment
    assert seen["stdin"] == ""
    assert lines[1] == "to stderr"  # stderr shares the output pipe


def test_a_forked_command_has_a_fresh_interpreters_path_and_may_keep_stderr_apart(
    server: ForkServer, tmp_path: Path
) -> None:
    """As `python -m` in its directory: the directory first, then `PYTHONPATH`; its standard
    error on a pipe of its own when asked (as `subprocess.run(capture_output=True)`)."""
    extra = tmp_path / "extra"
    env = {"PYTHONPATH": f"{extra}{os.pathsep}{ROOT}"}
    process = server.spawn([*PROBE], env, cwd=str(tmp_path), separate_stderr=True)
    assert process.stderr is not None
    with process.stderr:
        errors = process.stderr.read()
    (line,) = read_all(process)
    assert process.wait(timeout=30) == 0
    assert json.loads(line)["path"] == [str(tmp_path), str(extra), str(ROOT)]
    assert errors == "to stderr\n"
    fresh = subprocess.run(
        [*PROBE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(fresh.stdout)["path"] == json.loads(line)["path"]


def test_a_forked_command_ends_as_the_interpreter_does(server: ForkServer) -> None:
    """Its running non-daemon threads are joined, then its exit hooks run, as at a fresh
    interpreter's exit."""
    process = server.spawn([*PROBE, "linger", "exit", "5"], {})
    lines = read_all(process)
    assert process.wait(timeout=30) == 5
    assert lines[-2:] == ["thread done", "atexit ran"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_a_signalled_command_reports_the_signal_as_popen_does(
    server: ForkServer, sig: signal.Signals
) -> None:
    process = server.spawn([*PROBE, "wait"], {})
    assert process.stdout is not None
    assert json.loads(process.stdout.readline())["argv"][1:] == ["wait"]
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    process.send_signal(sig)
    assert process.wait(timeout=30) == -sig
    assert process.poll() == -sig
    process.kill()  # a no-op once it exited, as for Popen
    process.stdout.close()


def test_a_command_whose_caller_went_away_is_killed(server: ForkServer) -> None:
    process = server.spawn([*PROBE, "wait"], {})
    assert process.stdout is not None
    process.stdout.readline()
    pid = process.pid
    process.stdout.close()
    del process  # its connection closes, as when its caller dies
    assert exited_within(pid, 30)


def test_a_command_in_a_session_of_its_own_writes_to_its_file_on_its_cores(
    server: ForkServer, tmp_path: Path
) -> None:
    core = sorted(os.sched_getaffinity(0))[-1]
    log = tmp_path / "probe.log"
    with log.open("ab") as out:
        process = server.spawn(
            [*PROBE, "exit", "0"], {}, output=out.fileno(), new_session=True, cpus=[core]
        )
    assert process.stdout is None
    assert process.wait(timeout=30) == 0
    seen = json.loads(log.read_text().splitlines()[0])
    assert seen["sid"] == seen["pgid"] == seen["pid"] == process.pid
    assert seen["cpus"] == [core]
    # Without a session of its own it stays in the server's.
    plain = server.spawn([*PROBE, "exit", "0"], {})
    (line, *_) = read_all(plain)
    assert json.loads(line)["sid"] != plain.pid
    assert plain.wait(timeout=30) == 0


def test_a_client_in_another_process_reaches_the_server_its_environment_names(
    server: ForkServer,
) -> None:
    client = ForkClient.from_environment({FORK_SERVER_ENV: str(server.socket_path)})
    assert client is not None
    assert ForkClient.from_environment({}) is None
    process = client.spawn([*PROBE, "exit", "4"], {"PROBE": "y"})
    (line, *_) = read_all(process)
    assert json.loads(line)["probe"] == "y"
    assert process.wait(timeout=30) == 4


def test_a_client_naming_no_server_gets_an_error_naming_the_socket(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.sock"
    with pytest.raises(ForkServerError, match=str(missing)):
        ForkClient(missing).spawn([*PROBE], {})


def test_a_session_command_whose_caller_went_away_is_killed_with_its_group(
    server: ForkServer,
) -> None:
    process = server.spawn([*PROBE, "child", "wait"], {}, new_session=True)
    assert process.stdout is not None
    seen = json.loads(process.stdout.readline())
    process.stdout.close()
    del process
    assert exited_within(seen["pid"], 30)
    assert exited_within(seen["child"], 30)


def test_closing_the_server_kills_what_it_runs(tmp_path: Path) -> None:
    server = ForkServer(tmp_path / "fs", preload=())
    process = server.spawn([*PROBE, "wait"], {})
    assert process.stdout is not None
    process.stdout.readline()
    server.close()
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.stdout.close()


@pytest.mark.parametrize(
    "argv",
    [["python", "script.py"], [sys.executable, "-c", "print(1)"], ["bash", "-m", "x"], []],
)
def test_only_python_module_commands_are_forked(server: ForkServer, argv: list[str]) -> None:
    with pytest.raises(ValueError, match="python -m MODULE"):
        python_module_of(argv)
    with pytest.raises(ValueError, match="python -m MODULE"):
        server.spawn(argv, {})


async def test_a_forked_engine_decodes_as_a_fresh_one(
    cache_dir: Path, engine_fork_server: ForkServer | None
) -> None:
    """The suite's engines are forked (tests/engine_forks.py): a forked engine and a fresh one
    give the same greedy tokens."""
    outputs = []
    for server in (engine_fork_server, None):
        with engines_forked_from(server), start_engine(cache_dir=cache_dir) as engine:
            assert isinstance(engine.process, ForkedProcess) == (server is not None)
            async with EngineClient(engine.base_url) as client:
                outputs.append((await client.generate(greedy(prompt_for(3), 12))).output_ids)
    assert outputs[0] == outputs[1]


PARENT = """
import sys, time
from pathlib import Path
from dressage_testkit.forkserver import ForkServer
server = ForkServer(Path(sys.argv[1]), preload=())
process = server.spawn([sys.executable, "-m", "tests.forkserver_probe", "wait"], {})
process.stdout.readline()
print(server._process.pid, process.pid, flush=True)
time.sleep(600)
"""


def test_a_server_whose_parent_died_exits_and_kills_what_it_runs(tmp_path: Path) -> None:
    """A test process killed outright leaves neither its fork server nor its engines behind."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "fs")], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    server_pid, command_pid = (int(x) for x in parent.stdout.readline().split())
    parent.kill()
    parent.wait(timeout=30)
    parent.stdout.close()
    assert exited_within(command_pid, 30)
    assert exited_within(server_pid, 30)


def test_an_exit_sent_right_behind_the_pid_is_read_as_the_exit() -> None:
    """A command that ends at once has its exit line sent right behind its pid; one read can
    take both, and the spawn's reply is the first line only, the exit the process's code."""
    ours, servers = socket.socketpair()
    with servers:
        servers.sendall(b'{"pid": 12345}\n{"exit": 4}\n')
        reply, rest = forkserver._read_line(ours)
    assert reply == {"pid": 12345}
    process = forkserver.ForkedProcess(12345, None, ours, pending=rest)
    assert process.poll() == 4
    assert process.wait(timeout=1) == 4
