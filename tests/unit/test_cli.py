"""The `dressage` command's own help and version: what a newcomer reads first."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dressage.cli import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def _output(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert _output(["--version"], capsys) == f"dressage {version}"


def test_help_says_what_dressage_does_and_lists_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The top-level help describes the product (staleness, weight versions), not the module,
    gives each subcommand one line, and points at `dressage validate` before a run."""
    text = _output(["--help"], capsys)
    assert "dispatcher" not in text
    assert "keeps stale data out of the trainer" in text
    assert "weight version" in text
    for name, (_, line) in SUBCOMMANDS.items():
        assert f"{name} {' '.join(line.split())}" in text
    assert "Start with `dressage validate JOB.yaml`" in text
    assert "--version" in text


def test_run_help_says_a_rerun_resumes_and_what_fresh_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _output(["run", "--help"], capsys)
    assert "A rerun of the same command resumes after the last checkpoint" in text
    assert "`--fresh` deletes the run directory and starts over" in text
    assert "`dressage validate JOB.yaml`" in text


def test_a_finished_run_says_how_to_train_on_or_start_over(tmp_path: Path) -> None:
    from dressage.runner.local import finished_message

    line = finished_message(5, 3, tmp_path / "job")
    assert line.startswith("nothing to do: 5 of 3 steps done")
    assert "`--steps N` with N > 5 trains on to step N" in line
    assert "`--fresh` starts over" in line
    assert str(tmp_path / "job") in line
