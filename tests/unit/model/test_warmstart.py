"""The supervised warm start: it trains, writes a loadable checkpoint, and is cached."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import torch
from dressage_testkit.trainer import SMALL, small_model

from dressage.api.job import TaskSpec, WarmStartSpec
from dressage.model.tiny import build_tiny_model
from dressage.model.warmstart import (
    WarmStartResult,
    building,
    cache_key,
    expected_reward,
    warm_start,
)
from dressage.tasks import get_task
from dressage.tasks.codec import PromptCodec

torch.set_num_threads(1)


def test_warm_start_trains_saves_and_reuses_its_cache(tmp_path: Path) -> None:
    base = small_model(tmp_path / "base")
    task = TaskSpec(params={"maxOperand": 3})
    settings = WarmStartSpec(target_reward=1.0, max_steps=10, batch_size=8, eval_prompts=16)
    logs: list[str] = []
    first = warm_start(base, task, settings, tmp_path / "cache", log=logs.append)
    assert not first.cached
    assert first.steps == 10  # the target is out of reach: it stops at max_steps
    assert 0.0 < first.expected_reward < 1.0
    assert logs[-1].startswith("warm start: step 10 ")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "warmstart.json"):
        assert (first.model_dir / name).is_file()

    again = warm_start(base, task, settings, tmp_path / "cache", log=logs.append)
    assert again.cached
    assert again.model_dir == first.model_dir
    assert again.expected_reward == first.expected_reward

    other = settings.model_copy(update={"max_steps": 11})
    assert cache_key(base, task, other) != cache_key(base, task, settings)


def test_warm_start_on_an_environment_learns_its_expert_turns(tmp_path: Path) -> None:
    """On a multi-turn environment the warm start trains on every turn of expert episodes."""
    base = build_tiny_model(tmp_path / "base", config=replace(SMALL, max_position_embeddings=256))
    task = TaskSpec(name="household")
    settings = WarmStartSpec(target_reward=1.0, max_steps=10, batch_size=8, eval_prompts=8)
    codec = PromptCodec.from_pretrained(base)
    env = get_task(task)
    from transformers import AutoModelForCausalLM

    untrained = AutoModelForCausalLM.from_pretrained(str(base))
    before = expected_reward(untrained, codec, env, 8, pad_id=0)
    result = warm_start(base, task, settings, tmp_path / "cache", log=lambda _: None)
    assert result.steps == 10
    assert before < result.expected_reward < 1.0
    assert cache_key(base, task, settings) != cache_key(base, TaskSpec(), settings)


def test_a_warm_start_being_built_elsewhere_is_waited_for_and_read(tmp_path: Path) -> None:
    """While another process holds the entry's lock, `warm_start` waits (saying so) and then
    reads what that process wrote instead of training it again."""
    base = small_model(tmp_path / "base")
    task = TaskSpec(params={"maxOperand": 3})
    settings = WarmStartSpec(target_reward=1.0, max_steps=10, batch_size=8, eval_prompts=16)
    target = tmp_path / "cache" / "warmstart" / cache_key(base, task, settings)
    waiting = threading.Event()
    results: list[WarmStartResult] = []

    def log(line: str) -> None:
        if "waiting for it" in line:
            waiting.set()

    with building(target):
        other = threading.Thread(
            target=lambda: results.append(
                warm_start(base, task, settings, tmp_path / "cache", log=log)
            )
        )
        other.start()
        assert waiting.wait(timeout=60)
        # the process holding the lock writes its result (the entry's meta is what is read)
        target.mkdir(parents=True)
        (target / "warmstart.json").write_text(
            json.dumps({"expected_reward": 0.25, "steps": 7}), encoding="utf-8"
        )
    other.join(timeout=60)
    assert results == [WarmStartResult(target, 0.25, 7, True)]


def test_a_lock_left_by_a_dead_builder_does_not_block(tmp_path: Path) -> None:
    """The lock is the open file's `flock`, gone with its holder: a lock file left behind
    does not hold anyone up."""
    target = tmp_path / "warmstart" / "entry"
    with building(target):
        pass
    assert (target.parent / ".entry.lock").is_file()
    said: list[str] = []
    with building(target, said.append):
        pass
    assert said == []
