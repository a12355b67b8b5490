"""The LoRA learning benchmark's figures: reward windows, a published version's parameters and
bytes from its safetensors headers, and one setting's row."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import lora_learning  # noqa: E402


def _history(rewards: list[float]) -> list[dict[str, Any]]:
    return [
        {"step": i + 1, "reward": r, "rollout_seconds": 0.1, "train_seconds": 0.2,
         "publish_seconds": 0.05 * (i + 1)}
        for i, r in enumerate(rewards)
    ]


def test_the_first_and_last_ten_steps_and_the_rise() -> None:
    figures = lora_learning.reward_windows(_history([0.1] * 10 + [0.5] * 20 + [0.7] * 10))
    assert figures == {"window": 10, "reward_first": 0.1, "reward_last": 0.7,
                       "reward_rise": pytest.approx(0.6)}


def test_a_short_run_compares_its_halves() -> None:
    figures = lora_learning.reward_windows(_history([0.0, 0.2, 0.4, 0.6, 0.8]))
    assert figures["window"] == 2
    assert figures["reward_first"] == pytest.approx(0.1)
    assert figures["reward_last"] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="1 steps"):
        lora_learning.reward_windows(_history([0.5]))


@given(st.lists(st.floats(0, 1), min_size=2, max_size=60))
def test_the_rise_is_the_last_window_less_the_first(rewards: list[float]) -> None:
    figures = lora_learning.reward_windows(_history(rewards))
    assert figures["window"] == min(10, len(rewards) // 2)
    rise = figures["reward_last"] - figures["reward_first"]
    assert figures["reward_rise"] == pytest.approx(rise, abs=2e-4)


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 4 * lora_learning._elements(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_a_version_s_parameters_and_bytes_come_from_its_files(tmp_path: Path) -> None:
    weights = tmp_path / "run" / "weights"
    for version in ("v2", "v10", "v9"):
        (weights / version).mkdir(parents=True)
    (weights / "tmp").mkdir()
    newest = weights / "v10"
    _safetensors(newest / "adapter_model.safetensors", {"a": [16, 64], "b": [64, 16]})
    (newest / "adapter_config.json").write_text("{}")
    assert lora_learning.last_version_dir(tmp_path / "run") == newest
    assert lora_learning.last_version_dir(tmp_path / "none") is None
    figures = lora_learning.safetensors_figures(newest)
    assert figures["parameters"] == 2048
    files = [newest / "adapter_model.safetensors", newest / "adapter_config.json"]
    assert figures["publish_bytes"] == sum(p.stat().st_size for p in files)


def test_a_setting_s_row() -> None:
    history = _history([0.2] * 10 + [0.6] * 10)
    row = lora_learning.summarize("lora", history, 2048 * 1024,
                                  {"parameters": 10, "publish_bytes": 99})
    assert row["setting"] == "lora"
    assert row["steps"] == 20
    assert row["reward_rise"] == pytest.approx(0.4)
    assert row["step_seconds_median"] == pytest.approx(0.3 + 0.05 * 10.5, abs=1e-3)
    assert row["trainer_peak_rss_mib"] == 2048.0
    assert (row["trainable_parameters"], row["publish_bytes"]) == (10, 99)
    table = lora_learning.table([lora_learning.mean_row("lora", "x.yaml", [row])])
    assert "lora | 20 | 1 | 0.200 | 0.600 | 0.400 | 0.400" in table


def test_a_settings_row_averages_the_rewards_over_its_seeds() -> None:
    per_seed = [
        {"setting": "lora", "steps": 150, "reward_first": 0.3, "reward_last": 0.7,
         "reward_rise": 0.4, "step_seconds_median": 0.2, "publish_seconds_median": 0.01,
         "trainer_peak_rss_mib": 600.0, "trainable_parameters": 10, "publish_bytes": 99},
        {"setting": "lora", "steps": 150, "reward_first": 0.2, "reward_last": 0.8,
         "reward_rise": 0.6, "step_seconds_median": 0.4, "publish_seconds_median": 0.03,
         "trainer_peak_rss_mib": None, "trainable_parameters": 10, "publish_bytes": 99},
    ]
    row = lora_learning.mean_row("lora", "examples/local-lora.yaml", per_seed)
    assert row["reward_rise"] == pytest.approx(0.5)
    assert row["reward_first"] == pytest.approx(0.25)
    assert row["rise_by_seed"] == [0.4, 0.6]
    assert row["seeds"] == 2
    assert row["step_seconds_median"] == pytest.approx(0.3)
    assert row["trainer_peak_rss_mib"] == pytest.approx(600.0)  # the seeds that measured it
    assert row["publish_bytes"] == 99
