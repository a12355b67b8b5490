"""`dressage eval`: bad input is a one-line error that names it, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dressage.cli import main
from dressage.runner.eval_cli import version_step


def _job(tmp_path: Path, **spec: object) -> Path:
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "j"},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "evaluation": {"prompts": 4},
            **spec,
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_version_the_job_never_published_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "w" / "j" / "weights" / "v4").mkdir(parents=True)
    (tmp_path / "w" / "j" / "weights" / "v4" / "config.json").write_text("{}")
    code = main(["eval", str(_job(tmp_path)), "--workdir", str(tmp_path / "w"), "--version", "v7"])
    assert code == 2
    assert "--version v7: no published version v7" in (err := _error(capsys))
    assert "published and kept: v4" in err


def test_a_directory_without_a_checkpoint_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", str(_job(tmp_path)), "--weights", str(tmp_path)])
    assert code == 2
    assert f"--weights {tmp_path}: no Hugging Face checkpoint" in _error(capsys)


def test_an_evaluation_dataset_without_the_prompt_column_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "1+1=", "a": "2"}\n', encoding="utf-8")
    dataset = {"path": str(rows), "promptColumn": "q", "answerColumn": "a"}
    job = _job(
        tmp_path,
        task={"name": "dataset", "dataset": dataset},
        evaluation={"dataset": {**dataset, "promptColumn": "question"}},
    )
    assert main(["eval", str(job)]) == 2
    assert "spec.evaluation.dataset.promptColumn" in (err := _error(capsys))
    assert "no column 'question'" in err


def test_a_version_label_names_its_step() -> None:
    assert [version_step(v) for v in ("v0", "v50", "weights", "v-x")] == [0, 50, 0, 0]
