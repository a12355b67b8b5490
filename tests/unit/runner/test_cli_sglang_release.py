"""`dressage run` with a manifest naming an SGLang release newer than the tested range warns
once, naming the field and the tested range; a tested release gets no warning. (The run is
stopped by `--steps 0`, which the pre-flight checks refuse before anything starts.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import yaml

from dressage.api.sglang import SGLANG_NEWEST_TESTED, SGLANG_TESTED_RANGE
from dressage.runner import cli

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "local-tiny.yaml"


@pytest.fixture(autouse=True)
def _isolated_job_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dressage run` puts the manifest's directory on `sys.path`; keep that to the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr("dressage.tasks.usercode._job_dirs", [])


def _run_checks_only(tmp_path: Path, sglang_version: str) -> int:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["inference"]["sglangVersion"] = sglang_version
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args([str(path), "--steps", "0"]))


def test_an_untested_newer_release_warns_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run_checks_only(tmp_path, "0.6.1")
    err = capsys.readouterr().err
    assert code == 2  # `--steps 0`: stopped before anything runs
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert "spec.inference.sglangVersion" in warnings[0]
    assert "0.6.1" in warnings[0]
    assert SGLANG_TESTED_RANGE in warnings[0]


def test_a_tested_release_runs_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_checks_only(tmp_path, SGLANG_NEWEST_TESTED)
    assert "warning:" not in capsys.readouterr().err
