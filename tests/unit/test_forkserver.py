"""The fork server's pure parts: which command lines it forks, and how it reads a request."""

from __future__ import annotations

import json
import sys

import pytest
from dressage_testkit.forkserver import python_module_of
from dressage_testkit.forkserver_loop import base_sys_path, child_sys_path, parse_request


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


def test_a_forked_commands_path_is_a_fresh_interpreters_in_its_directory() -> None:
    """A fresh `python -m` puts its working directory first, then the `PYTHONPATH` entries,
    then the standard library and site-packages; the server's own first entries make way."""
    server = ["/srv", "/srv/extra", "/usr/lib/python3.11", "/venv/site-packages"]
    base = base_sys_path(server, "/srv/extra")
    assert base == ["/usr/lib/python3.11", "/venv/site-packages"]
    assert child_sys_path(base, "/job", "/a:/b") == ["/job", "/a", "/b", *base]
    assert child_sys_path(base, "/job", "") == ["/job", *base]
