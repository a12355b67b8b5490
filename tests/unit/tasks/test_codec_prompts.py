"""Dataset prompts through the model's chat template: messages and the system prompt are
rendered by `apply_chat_template`, raw prompts reach the model as is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dressage.api.job import TaskSpec
from dressage.model.tokenizer import build_tokenizer_files
from dressage.tasks import get_task
from dressage.tasks.codec import PromptCodec, TaskPrompts, demonstration

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> PromptCodec:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_files(out)
    return PromptCodec.from_pretrained(out)


def _prompts(tmp_path: Path, codec: PromptCodec, **dataset: Any) -> TaskPrompts:
    path = tmp_path / "d.jsonl"
    rows = [
        {"q": "2+2=", "a": "4", "chat": [{"role": "user", "content": "3+3="}]},
        {"q": "1+2=", "a": "3", "chat": [{"role": "user", "content": "1+1="}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = TaskSpec.model_validate(
        {"name": "dataset", "dataset": {"path": str(path), "answerColumn": "a", **dataset}}
    )
    return TaskPrompts(get_task(spec), codec)


def test_a_prompt_column_is_one_user_message_through_the_template(
    tmp_path: Path, codec: PromptCodec
) -> None:
    source = _prompts(tmp_path, codec, promptColumn="q")
    assert source.prompt_ids(0) == codec.encode_text("<|user|>2+2=<|end|>\n<|assistant|>")


def test_the_system_prompt_comes_first(tmp_path: Path, codec: PromptCodec) -> None:
    source = _prompts(tmp_path, codec, promptColumn="q", systemPrompt="Answer with a number.")
    assert codec.tokenizer.decode(source.prompt_ids(1)) == (
        "<|system|>Answer with a number.<|end|>\n<|user|>1+2=<|end|>\n<|assistant|>"
    )


def test_a_messages_column_is_rendered_by_apply_chat_template(
    tmp_path: Path, codec: PromptCodec
) -> None:
    source = _prompts(tmp_path, codec, messagesColumn="chat", systemPrompt="S")
    expected = codec.tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "3+3="}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert source.prompt_ids(0) == codec.encode_text(expected)


def test_a_raw_prompt_reaches_the_model_as_is(tmp_path: Path, codec: PromptCodec) -> None:
    source = _prompts(tmp_path, codec, promptColumn="q", promptFormat="raw")
    assert source.prompt_ids(1) == codec.encode_text("1+2=")


def test_the_warm_start_demonstrates_the_same_context(tmp_path: Path, codec: PromptCodec) -> None:
    source = _prompts(tmp_path, codec, promptColumn="q", systemPrompt="S")
    [(context, answer)] = demonstration(source.task, codec, 1)
    assert context == source.prompt_ids(1)
    assert answer == codec.encode_answer("3")


async def test_areward_scores_generated_ids_like_reward(tmp_path: Path, codec: PromptCodec) -> None:
    source = _prompts(tmp_path, codec, promptColumn="q")
    right, wrong = codec.encode_answer("4"), codec.encode_answer("5")
    assert (source.reward(0, right), source.reward(0, wrong)) == (1.0, 0.0)
    assert (await source.areward(0, right), await source.areward(0, wrong)) == (1.0, 0.0)


async def test_areward_of_a_built_in_task_runs_its_reward(codec: PromptCodec) -> None:
    source = TaskPrompts(get_task(TaskSpec()), codec)
    answer = source.task.prompt(0).answer  # type: ignore[union-attr]
    assert await source.areward(0, codec.encode_answer(answer)) == 1.0
