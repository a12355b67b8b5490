"""Model staging onto shared storage: once, completely, and with a clear error.

The hub is the boundary faked here (no network): the download function writes what
`huggingface_hub.snapshot_download` would, or fails the way it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dressage.api.job import ModelSpec
from dressage.cli import main
from dressage.model.staging import StagingError, is_staged, stage_model


class Hub:
    def __init__(self, *, files: dict[str, str] | None = None, error: Exception | None = None):
        self.files = {"config.json": "{}", "model.safetensors": "w"} if files is None else files
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        for name, text in self.files.items():
            (Path(kwargs["local_dir"]) / name).write_text(text)
        return str(kwargs["local_dir"])


def test_a_model_is_downloaded_once_with_the_token_and_revision(tmp_path: Path) -> None:
    hub = Hub()
    dest = tmp_path / "models" / "Qwen--Qwen3-4B"
    assert stage_model("Qwen/Qwen3-4B", dest, revision="main", token="t", download=hub)
    assert (dest / "model.safetensors").read_text() == "w"
    assert is_staged(dest, "Qwen/Qwen3-4B", "main")
    assert hub.calls[0]["repo_id"] == "Qwen/Qwen3-4B"
    assert hub.calls[0]["revision"] == "main"
    assert hub.calls[0]["token"] == "t"
    # A restarted pod finds it staged and downloads nothing.
    assert not stage_model("Qwen/Qwen3-4B", dest, revision="main", token="t", download=hub)
    assert len(hub.calls) == 1
    # Another revision is staged anew.
    assert stage_model("Qwen/Qwen3-4B", dest, revision="v2", download=hub)
    assert is_staged(dest, "Qwen/Qwen3-4B", "v2")


def test_a_failed_download_leaves_nothing_half_written(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    with pytest.raises(StagingError, match=r"spec.model.source.*'org/gated'.*HF_TOKEN"):
        stage_model("org/gated", dest, download=Hub(error=PermissionError("401 gated")))
    with pytest.raises(StagingError, match=r"no config\.json"):
        stage_model("org/data", dest, download=Hub(files={"train.jsonl": ""}))
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_restaging_keeps_the_complete_earlier_copy(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    stage_model("org/m", dest, download=Hub())
    with pytest.raises(StagingError):
        stage_model("org/m", dest, revision="v9", download=Hub(error=OSError("offline")))
    assert is_staged(dest, "org/m", None)


def test_the_command_reports_a_failure_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["stage-model", "--source", "org/absent", "--dest", str(tmp_path / "m")])
    assert code == 1
    assert "dressage stage-model: spec.model.source: could not download 'org/absent'" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("source", "revision", "path"),
    [
        ("Qwen/Qwen3-4B", None, "/data/models/Qwen--Qwen3-4B"),
        ("gpt2", "abc", "/data/models/gpt2@abc"),
        ("/mnt/models/mine", None, "/mnt/models/mine"),
        ("builtin:tiny", None, "builtin:tiny"),
        ("./local/model", None, "./local/model"),
    ],
)
def test_where_each_kind_of_source_is_read(source: str, revision: str | None, path: str) -> None:
    spec = ModelSpec(source=source, revision=revision)
    assert spec.staged_path("/data/") == path
    assert spec.is_hub_id == (path != source)


def test_offline_staging_of_a_model_missing_from_the_cache_says_where_it_looked(
    tmp_path: Path,
) -> None:
    hub = Hub(error=FileNotFoundError("no snapshot"))
    with pytest.raises(StagingError, match="HF_HUB_OFFLINE is set") as info:
        stage_model("acme/absent", tmp_path / "m", download=hub, offline=True)
    assert "spec.model.source" in str(info.value)
    assert hub.calls[0]["local_files_only"] is True
    assert "local_dir" not in hub.calls[0]
    assert not (tmp_path / "m").exists()
