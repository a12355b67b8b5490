"""The local math recipe (`examples/local-math.yaml`): its dataset ships next to it, every row
is usable, the math reward accepts every reference answer and refuses a wrong one, and the
generator script reproduces the shipped file."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from dressage.api.loader import load_job
from dressage.tasks import get_task, usercode
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.usercode import add_job_dir

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "local-math.yaml"

pytest.importorskip("math_verify")


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DatasetTask:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(usercode, "_job_dirs", [])
    monkeypatch.chdir(tmp_path)  # the recipe's paths are relative to the manifest
    add_job_dir(RECIPE)
    built = get_task(load_job(RECIPE).spec.task)
    assert isinstance(built, DatasetTask)
    return built


def test_every_row_of_the_shipped_dataset_is_usable(task: DatasetTask) -> None:
    assert len(task) == 256
    assert task.bad_row_count == 0
    assert task.prompt(0).messages == (
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": task.prompt(0).text},
    )


def test_the_math_reward_accepts_the_references_and_refuses_wrong_answers(
    task: DatasetTask,
) -> None:
    prompts = [task.prompt(i) for i in range(0, 256, 8)]
    assert [task.reward(p, p.answer) for p in prompts] == [1.0] * len(prompts)
    assert [task.reward(p, f"\\boxed{{{p.answer}}}") for p in prompts[:4]] == [1.0] * 4
    assert [task.reward(p, str(int(p.answer) + 1)) for p in prompts] == [0.0] * len(prompts)
    assert task.reward_stats.snapshot()["failures"] == {}


def test_the_prompts_fit_the_tiny_model(task: DatasetTask, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from dressage.model.tokenizer import build_tokenizer_files

    build_tokenizer_files(tmp_path / "tok")
    source = TaskPrompts(task, PromptCodec.from_pretrained(tmp_path / "tok"))
    lengths = [len(source.prompt_ids(i)) for i in range(256)]
    assert max(lengths) < 100
    assert source.codec.tokenizer.unk_token_id not in source.prompt_ids(0)


def test_the_generator_reproduces_the_shipped_file() -> None:
    script = ROOT / "examples" / "data" / "make_math_tiny.py"
    rows = runpy.run_path(str(script))["rows"]()
    shipped = (ROOT / "examples" / "data" / "math-tiny.jsonl").read_text(encoding="utf-8")
    assert [json.loads(line) for line in shipped.splitlines()] == rows
