"""A local run's child processes: a child started with `cpus` runs (with every thread it starts)
on those cores only, `pin_this_process` pins the threads a process already runs as well as the
ones it starts later, `stop_together` signals every child before it waits, and the test
helpers start their processes through the same launcher. Each test starts a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from dressage_testkit.forkserver import ForkedProcess, ForkServer, fork_environment
from dressage_testkit.processes import exited_within, run_until_ready

from dressage.runner.processes import (
    SPAWNER_ENV,
    ChildFailed,
    ChildProcess,
    Process,
    available_cpus,
    fresh_process,
    stop_together,
)

ROOT = Path(__file__).resolve().parents[2]


PRINT_AFFINITY = textwrap.dedent(
    """
    import os, threading
    seen = []
    t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    print("main", sorted(os.sched_getaffinity(0)), "thread", seen[0], flush=True)
    """
)


def _wait_exit(child: ChildProcess, timeout_s: float = 60.0) -> None:
    assert child.process is not None
    child.process.wait(timeout=timeout_s)
    assert child.stop() == 0


def test_a_child_started_with_cpus_runs_on_them_only(tmp_path: Path) -> None:
    core = available_cpus()[-1]
    child = ChildProcess(
        "probe",
        [sys.executable, "-c", PRINT_AFFINITY],
        log_path=tmp_path / "probe.log",
        cpus=[core],
    )
    child.start()
    _wait_exit(child)
    assert (tmp_path / "probe.log").read_text().strip() == f"main [{core}] thread [{core}]"


def test_a_child_without_cpus_keeps_the_parents_cores(tmp_path: Path) -> None:
    child = ChildProcess(
        "probe", [sys.executable, "-c", PRINT_AFFINITY], log_path=tmp_path / "probe.log"
    )
    child.start()
    _wait_exit(child)
    cores = sorted(os.sched_getaffinity(0))
    assert (tmp_path / "probe.log").read_text().strip() == f"main {cores} thread {cores}"


def tagging_spawner(
    argv: Sequence[str], env: Mapping[str, str], *, cpus: Sequence[int] | None
) -> Process:
    """A spawner named in `DRESSAGE_SPAWNER`: a fresh process that knows who started it."""
    return fresh_process(argv, dict(env, SPAWNED_BY="tagging_spawner"), cpus=cpus)


async def test_a_child_is_started_by_the_spawner_its_environment_names(tmp_path: Path) -> None:
    spawner = f"{__name__}:tagging_spawner"
    child = ChildProcess(
        "probe",
        [sys.executable, "-c", "import os; print('by', os.environ.get('SPAWNED_BY'))"],
        log_path=tmp_path / "probe.log",
        env=dict(os.environ, **{SPAWNER_ENV: spawner}),
    )
    child.start()
    assert await child.wait_for("by", 60) == "tagging_spawner"
    _wait_exit(child)


async def test_a_python_module_child_is_forked_from_the_server_its_environment_names(
    tmp_path: Path, engine_fork_server: ForkServer | None
) -> None:
    """The suite names its fork server and its spawner in the environment
    (tests/engine_forks.py); a child forked there runs as a fresh one would: in a session of
    its own, on its cores, its output in its log, stopped by SIGTERM to its group."""
    if engine_fork_server is None:
        pytest.skip("DRESSAGE_TEST_FRESH_ENGINES: no fork server")
    core = available_cpus()[-1]
    env = dict(os.environ, **fork_environment(engine_fork_server.socket_path))
    child = ChildProcess(
        "probe",
        [sys.executable, "-m", "tests.forkserver_probe", "child", "wait"],
        log_path=tmp_path / "probe.log",
        env=env,
        cpus=[core],
    )
    child.start()
    assert isinstance(child.process, ForkedProcess)
    seen = json.loads("{" + await child.wait_for("{", 60))
    assert seen["sid"] == seen["pgid"] == seen["pid"] == child.process.pid
    assert seen["cpus"] == [core]
    assert child.stop(grace_s=30) == -signal.SIGTERM
    assert exited_within(seen["child"], 30)  # the group's SIGTERM reached its `sleep` too
    assert json.loads((tmp_path / "probe.log").read_text().splitlines()[0]) == seen


def test_pin_this_process_pins_running_and_later_threads() -> None:
    core = available_cpus()[-1]
    script = textwrap.dedent(
        f"""
        import os, threading
        from dressage.runner.processes import pin_this_process
        release = threading.Event()
        early = []
        def wait_then_report():
            release.wait()
            early.append(sorted(os.sched_getaffinity(0)))
        t = threading.Thread(target=wait_then_report); t.start()
        pin_this_process([{core}])
        release.set(); t.join()
        late = []
        u = threading.Thread(target=lambda: late.append(sorted(os.sched_getaffinity(0))))
        u.start(); u.join()
        print(sorted(os.sched_getaffinity(0)), early[0], late[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == f"[{core}] [{core}] [{core}]", out.stderr


def test_pin_this_process_refuses_cores_it_cannot_use() -> None:
    script = textwrap.dedent(
        """
        from dressage.runner.processes import available_cpus, pin_this_process
        try:
            pin_this_process([max(available_cpus()) + 1])
        except ValueError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
        check=True,
    )
    assert "are not available here" in out.stdout, out.stderr


SIGTERM_WAITS_FOR_SIBLINGS = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    here, name, siblings = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    def on_term(*_):
        (here / name).touch()
        # Exits only once every sibling got its SIGTERM too: stopped one after the other,
        # the first would wait here until it is killed.
        end = time.monotonic() + 60
        while not all((here / s).exists() for s in siblings) and time.monotonic() < end:
            time.sleep(0.01)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    while True:
        time.sleep(1)
    """
)
IGNORES_SIGTERM = textwrap.dedent(
    """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        time.sleep(1)
    """
)


async def test_stop_together_signals_every_child_before_waiting_and_kills_the_stubborn(
    tmp_path: Path,
) -> None:
    names = ["a", "b", "c"]
    children = [
        ChildProcess(
            name,
            [sys.executable, "-c", SIGTERM_WAITS_FOR_SIBLINGS, str(tmp_path), name, *names],
            log_path=tmp_path / f"{name}.log",
        )
        for name in names
    ]
    stubborn = ChildProcess(
        "stubborn", [sys.executable, "-c", IGNORES_SIGTERM], log_path=tmp_path / "stubborn.log"
    )
    for child in [*children, stubborn]:
        child.start()
        await child.wait_for("ready", 60)

    stop_together([*children, stubborn], grace_s=5)

    assert [child.process.returncode for child in children if child.process] == [0, 0, 0]
    assert stubborn.process is not None
    assert stubborn.process.returncode == -signal.SIGKILL


def test_the_test_helpers_launcher_is_the_runners() -> None:
    """`run_until_ready` (the engine and proxy test helpers) starts through `ChildProcess`: the
    URL after the ready line, the process stopped once the block ends, and a process that ends
    before its ready line fails as a run's child does, with its output."""
    serve = "import time; print('ready on http://x', flush=True); time.sleep(600)"
    with run_until_ready("probe", [sys.executable, "-c", serve], "ready on ") as ready:
        assert ready.url == "http://x"
        assert ready.process.poll() is None
    assert ready.process.returncode == -signal.SIGTERM
    with (
        pytest.raises(ChildFailed, match="probe exited before printing 'ready on '") as caught,
        run_until_ready("probe", [sys.executable, "-c", "print('no luck')"], "ready on "),
    ):
        pass
    assert "  | no luck" in str(caught.value)
