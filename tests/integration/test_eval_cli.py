"""`dressage eval` over a real engine and proxy: `--version vN` on a version the job published
(an engine and a proxy of its own on those weights) and `--proxy URL` (the version the engines
serve), each with its figures to stdout and a JSON file; an unreachable proxy is a one-line
error."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
import yaml
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

from dressage.cli import main

from .engine_support import make_uniform_checkpoint

pytestmark = pytest.mark.integration


def _job(tmp_path: Path, **evaluation: object) -> Path:
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "j"},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "rollout": {"maxNewTokens": 4},
            "evaluation": {"prompts": 6, "samplesPerPrompt": 2, "temperature": 1.0, **evaluation},
            "local": {"workdir": str(tmp_path / "w")},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def test_eval_through_a_running_proxy_reports_its_version(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "figures.json"
    with (
        start_engine(cache_dir=cache_dir, weight_version="v3") as engine,
        start_proxy([engine.base_url], "--record-token-versions") as proxy,
    ):
        code = main(["eval", str(_job(tmp_path)), "--proxy", proxy.base_url, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("eval v3  reward ")
    assert "pass@1 " in line
    assert "pass@2 " in line
    assert "6 prompts" in line
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["version"] == "v3"
    assert figures["step"] == 3
    assert set(figures["pass_at"]) == {"1", "2"}
    assert figures["prompts"] == 6


def test_eval_of_a_published_version_runs_on_an_engine_of_its_own(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A version where a run publishes it (`<workdir>/<job>/weights/v2`): here the tiny model
    with uniform logits, whose greedy answer is token 0 every time, so no prompt passes; the
    figures name the version and the step that published it."""
    job = _job(tmp_path, samplesPerPrompt=1, temperature=0.0)
    published = tmp_path / "w" / "j" / "weights" / "v2"
    shutil.copytree(make_uniform_checkpoint(cache_dir), published)
    out = tmp_path / "figures.json"
    code = main(["eval", str(job), "--version", "v2", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("eval v2  reward ")
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["version"] == "v2"
    assert figures["step"] == 2
    assert figures["prompts"] == 6
    assert figures["pass_at"] == {"1": 0.0}


def test_an_unreachable_proxy_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert main(["eval", str(_job(tmp_path)), "--proxy", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert f"--proxy {url}: unreachable" in err
