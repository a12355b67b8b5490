"""`dressage stage-model` as a process, offline, against a cache laid out as the Hugging Face
hub's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dressage.model.staging import is_staged


def test_offline_staging_copies_the_snapshot_from_the_hugging_face_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`HF_HUB_OFFLINE=1` and `HF_HOME` at a cache laid out as the hub's: the real
    `dressage stage-model` finds the model by its id and stages real files, not links."""
    from dressage.model import build_tiny_model
    from tests.hub_cache import write_hub_cache

    hf_home = tmp_path / "hf-home"
    write_hub_cache(hf_home, "acme/tiny", build_tiny_model(tmp_path / "built"))
    dest = tmp_path / "storage" / "models" / "acme--tiny"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    command = [sys.executable, "-m", "dressage", "stage-model", "--source", "acme/tiny"]
    done = subprocess.run(
        [*command, "--dest", str(dest)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "staged at" in done.stdout
    assert is_staged(dest, "acme/tiny", None)
    weights = dest / "model.safetensors"
    assert weights.is_file()
    assert not weights.is_symlink()
    assert weights.read_bytes() == (tmp_path / "built" / "model.safetensors").read_bytes()
    again = subprocess.run(
        [*command, "--dest", str(dest)], capture_output=True, text=True, timeout=120
    )
    assert "already staged" in again.stdout
