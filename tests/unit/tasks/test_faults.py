"""User-code faults: the frame a failure points at is the user's own line (not Dressage's, not
the standard library's), a blackbox program's traceback is read back from its standard error,
and each distinct error is logged once and counted."""

from __future__ import annotations

import importlib
import json
import logging
import pickle
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dressage
from dressage.tasks.faults import (
    AGENT_FIELD,
    REWARD_FIELD,
    FaultTally,
    UserCodeFailed,
    UserCodeFault,
    UserCodeFaults,
    UserFrame,
    fault_from_exception,
    fault_from_stderr,
    merge_reports,
    user_frame,
)
from dressage.tasks.rewards import RewardError

USER_CODE = """\
import json


def score(completion, row):
    return helper(row)


def helper(row):
    return row["missing"] * 2


def parses(completion, row):
    return json.loads(completion)
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    name = f"user_faults_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_CODE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield importlib.import_module(name)
    sys.modules.pop(name, None)


def _raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_the_frame_is_the_user_line_that_raised_not_its_caller(user_module: Any) -> None:
    exc = _raised(user_module.score, "4", {})
    fault = fault_from_exception(
        exc, field=REWARD_FIELD, reference="m:score", reason="reward_raised"
    )
    assert fault.error_type == "KeyError"
    assert fault.message == "'missing'"
    assert fault.frame is not None
    assert (Path(fault.frame.file).name, fault.frame.line) == (
        f"{user_module.__name__}.py",
        9,
    )
    assert fault.frame.function == "helper"
    assert fault.frame.code == 'return row["missing"] * 2'
    assert str(fault).startswith("spec.task.reward m:score raised KeyError: 'missing' (at ")
    assert str(fault).endswith(f"{user_module.__name__}.py:9, in helper)")


def test_a_library_error_points_at_the_user_line_that_called_the_library(
    user_module: Any,
) -> None:
    exc = _raised(user_module.parses, "{", {})
    fault = fault_from_exception(exc, field=REWARD_FIELD, reference="m:p", reason="reward_raised")
    assert fault.error_type == "JSONDecodeError"
    assert fault.frame is not None
    assert (fault.frame.function, fault.frame.line) == ("parses", 13)


def test_frames_of_dressage_and_of_python_itself_are_not_the_users() -> None:
    ours = str(Path(dressage.__file__).parent / "tasks" / "rewards.py")
    stdlib = json.__file__
    installed = str(Path(pytest.__file__).parent / "python_api.py")
    assert user_frame([(ours, 1, "call", None), (stdlib, 2, "loads", None)]) is None
    # A user's own package installed beside the others is next best.
    assert user_frame([(ours, 1, "call", None), (installed, 3, "f", "x")]) == UserFrame(
        installed, 3, "f", "x"
    )
    assert user_frame(
        [(ours, 1, "call", None), ("/jobs/r.py", 5, "g", "  y  "), (installed, 3, "f", "x")]
    ) == UserFrame("/jobs/r.py", 5, "g", "y")


def test_a_python_programs_traceback_gives_its_exception_and_frame() -> None:
    stderr = textwrap.dedent(
        """\
        some log line
        Traceback (most recent call last):
          File "/jobs/agents/solver.py", line 30, in <module>
            main()
          File "/jobs/agents/solver.py", line 12, in main
            answer = ask(client)["text"]
                     ~~~~~~~~~~~^^^^^^^^
          File "{stdlib}", line 346, in loads
            return _default_decoder.decode(s)
        KeyError: 'text'
        """
    ).format(stdlib=json.__file__)
    fault = fault_from_stderr(
        stderr, field=AGENT_FIELD, reference="python solver.py", reason="agent_failed", exit_code=1
    )
    assert (fault.error_type, fault.message) == ("KeyError", "'text'")
    assert fault.frame == UserFrame(
        "/jobs/agents/solver.py", 12, "main", 'answer = ask(client)["text"]'
    )


def test_a_chained_traceback_is_read_from_its_last_exception() -> None:
    stderr = textwrap.dedent(
        """\
        Traceback (most recent call last):
          File "/jobs/a.py", line 3, in f
        ValueError: first

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/jobs/a.py", line 9, in g
        openai.APIConnectionError: Connection error.
        """
    )
    fault = fault_from_stderr(
        stderr, field=AGENT_FIELD, reference="a", reason="agent_failed", exit_code=1
    )
    assert (fault.error_type, fault.message) == ("APIConnectionError", "Connection error.")
    assert fault.frame == UserFrame("/jobs/a.py", 9, "g")


def test_a_program_without_a_traceback_is_named_by_its_exit_code_and_last_line() -> None:
    fault = fault_from_stderr(
        "starting\nno model given\n",
        field=AGENT_FIELD,
        reference="./agent.sh",
        reason="agent_failed",
        exit_code=3,
    )
    assert str(fault) == "spec.task.agentCommand ./agent.sh: exited 3: no model given"


def _fault(line: int, message: str = "boom") -> UserCodeFault:
    return UserCodeFault(
        REWARD_FIELD,
        "m:f",
        "reward_raised",
        message,
        error_type="ValueError",
        frame=UserFrame("/jobs/m.py", line, "f", "raise ValueError(x)"),
    )


def test_each_distinct_error_is_logged_once_and_every_occurrence_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults = UserCodeFaults()
    with caplog.at_level(logging.WARNING, logger="dressage.tasks.faults"):
        assert faults.record(_fault(3, "bad row 1"), then="the sample gets reward 0")
        # The same raising line with another message is the same error.
        assert not faults.record(_fault(3, "bad row 2"))
        assert faults.record(_fault(7))
    assert [r.getMessage().splitlines() for r in caplog.records] == [
        [
            "user code failed: spec.task.reward m:f raised ValueError: bad row 1 (at "
            "/jobs/m.py:3, in f)",
            "    raise ValueError(x)",
            "  the sample gets reward 0; later occurrences of this error are counted, not logged",
        ],
        [
            "user code failed: spec.task.reward m:f raised ValueError: boom (at /jobs/m.py:7, "
            "in f)",
            "    raise ValueError(x)",
            "  later occurrences of this error are counted, not logged",
        ],
    ]
    assert [(e.fault.message, e.count) for e in faults.entries()] == [("bad row 1", 2), ("boom", 1)]
    assert faults.report()[0] == {
        "field": REWARD_FIELD,
        "reference": "m:f",
        "reason": "reward_raised",
        "call": None,
        "type": "ValueError",
        "message": "bad row 1",
        "file": "/jobs/m.py",
        "line": 3,
        "function": "f",
        "code": "raise ValueError(x)",
        "count": 2,
    }


def test_another_process_entries_are_absorbed_without_counting_twice() -> None:
    child = UserCodeFaults()
    child.record(_fault(3))
    parent = UserCodeFaults()
    parent.absorb(child.entries())
    child.record(_fault(3))
    parent.absorb(child.entries())  # cumulative: 2 in all, not 3
    parent.absorb(child.entries())
    assert [e.count for e in parent.entries()] == [2]


def test_report_entries_merge_across_invocations_of_a_run() -> None:
    first = UserCodeFaults()
    first.record(_fault(3, "first run"))
    second = UserCodeFaults()
    second.record(_fault(3, "second run"))
    second.record(_fault(3))
    second.record(_fault(7))
    merged = merge_reports(first.report(), second.report())
    assert [(e["line"], e["message"], e["count"]) for e in merged] == [
        (3, "first run", 3),
        (7, "boom", 1),
    ]
    assert UserCodeFault.from_dict(merged[0]) == _fault(3, "first run")


def test_a_tally_summarizes_the_most_frequent_faults() -> None:
    tally = FaultTally()
    for line in (1, 2, 2, 3, 4, 4, 4):
        tally.add(_fault(line))
    assert tally.summary(limit=2) == (
        "spec.task.reward m:f raised ValueError: boom (at /jobs/m.py:4, in f) (3 calls); "
        "spec.task.reward m:f raised ValueError: boom (at /jobs/m.py:2, in f) (2 calls); "
        "and 2 more"
    )


def test_failures_keep_their_fault_across_processes() -> None:
    # The rollout process sends failures and breaker errors to the trainer through a pipe.
    for failed in (UserCodeFailed(_fault(3)), RewardError(_fault(3), stop="setting")):
        again = pickle.loads(pickle.dumps(failed))
        assert type(again) is type(failed)
        assert (again.fault, again.stop, again.reason) == (
            failed.fault,
            failed.stop,
            "reward_raised",
        )
