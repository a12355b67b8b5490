"""The fork server's pure parts: which command lines it forks, and how it reads a request."""

from __future__ import annotations

import json
import sys

import pytest

from dressage.forkserver import parse_request, python_module_of


@pytest.mark.parametrize("python", [sys.executable, "python", "python3", "/usr/bin/python3"])
def test_a_python_module_command_line_is_its_module_and_arguments(python: str) -> None:
    assert python_module_of([python, "-m", "dressage", "engine", "serve"]) == (
        "dressage",
        ["engine", "serve"],
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["python"],
        ["python", "-m"],
        ["python", "script.py", "-m", "x"],
        ["python", "-c", "print(1)"],
        ["node", "-m", "x"],
    ],
)
def test_any_other_command_line_is_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="python -m MODULE"):
        python_module_of(argv)


def _request(**fields: object) -> bytes:
    body: dict[str, object] = {"argv": ["python", "-m", "m"], "env": {}, "cwd": "/"}
    body.update(fields)
    return json.dumps(body).encode() + b"\n"


def test_a_request_gives_argv_env_and_cwd() -> None:
    request = parse_request(_request(env={"A": "1"}, cwd="/tmp"))
    assert (request.argv, request.env, request.cwd) == (["python", "-m", "m"], {"A": "1"}, "/tmp")
    assert (request.new_session, request.cpus) == (False, None)


def test_a_request_may_ask_for_a_session_and_cores() -> None:
    request = parse_request(_request(new_session=True, cpus=[1, 0]))
    assert (request.new_session, request.cpus) == (True, [1, 0])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"argv": "python -m m"}, "argv"),
        ({"argv": ["python", "-m", 3]}, "argv"),
        ({"env": {"A": 1}}, "env"),
        ({"env": ["A=1"]}, "env"),
        ({"cwd": None}, "cwd"),
        ({"argv": ["python", "x.py"]}, "python -m MODULE"),
        ({"new_session": "yes"}, "new_session"),
        ({"cpus": []}, "cpus"),
        ({"cpus": [0, -1]}, "cpus"),
        ({"cpus": [True]}, "cpus"),
        ({"cpus": "0"}, "cpus"),
    ],
)
def test_a_malformed_request_names_its_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_request(_request(**fields))


def test_a_request_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        parse_request(b"[1, 2]\n")
