"""`dressage run`'s checks before it starts anything (`dressage.runner.startup_checks`): the job's
task is checked before the `--device`, the one check that imports torch, so a mistake in the
job's data is reported without that wait."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dressage.api.loader import ConfigurationError, load_job
from dressage.engine.embedded import cli as engine_cli
from dressage.runner.startup_checks import check_local_run

ROOT = Path(__file__).resolve().parents[3]


def _math_job(tmp_path: Path, dataset: str) -> Path:
    manifest = yaml.safe_load((ROOT / "examples" / "local-math.yaml").read_text())
    manifest["spec"]["task"]["dataset"]["path"] = dataset
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_a_missing_dataset_is_named_before_the_device_is_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_at: list[str] = []
    monkeypatch.setattr(engine_cli, "device_problem", lambda d: looked_at.append(d) or None)
    job = load_job(_math_job(tmp_path, str(tmp_path / "absent.jsonl")))

    with pytest.raises(ConfigurationError, match=r"spec\.task\.dataset\.path: .*absent\.jsonl"):
        check_local_run(job, steps=None, device="cuda:7")
    assert looked_at == []


def test_a_good_task_still_has_its_device_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_cli, "device_problem", lambda d: f"{d!r} is not here")
    dataset = ROOT / "examples" / "data" / "math-tiny.jsonl"
    job = load_job(_math_job(tmp_path, str(dataset)))

    with pytest.raises(ConfigurationError, match=r"--device: 'cuda:7' is not here"):
        check_local_run(job, steps=None, device="cuda:7")
