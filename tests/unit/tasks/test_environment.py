"""A user environment class named by import path (`spec.task.environment`): built with the task
spec, its episodes are played by the whitebox agent and demonstrated by the warm start like the
built-in environments'."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import ValidationError

from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.api.job import TaskSpec
from dressage.model.tokenizer import build_tokenizer_files
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.tasks import get_task, is_environment
from dressage.tasks.codec import PromptCodec, TaskPrompts, demonstration
from dressage.tasks.usercode import UserCodeError

pytest.importorskip("transformers")

GUESS = """
from dressage.tasks.base import Step


class GuessEpisode:
    def __init__(self, secret, limit):
        self.secret = secret
        self.low, self.high = 0, limit
        self.prompt = f"guess a number from 0 to {limit}"

    def step(self, action):
        try:
            guess = int(action.strip())
        except ValueError:
            return Step("say a number", 0.0, False)
        if guess == self.secret:
            return Step("right", 1.0, True)
        if guess < self.secret:
            self.low = guess + 1
            return Step("higher", 0.0, False)
        self.high = guess - 1
        return Step("lower", 0.0, False)

    def expert_action(self):
        return str((self.low + self.high) // 2)


class Guess:
    name = "guess"

    def __init__(self, spec):
        self.limit = int(spec.params.get("limit", 7))
        self.seed = spec.seed
        self.max_turns = spec.max_turns or 4

    def episode(self, index):
        return GuessEpisode((index * 5 + self.seed) % (self.limit + 1), self.limit)


class NotAnEnvironment:
    def __init__(self, spec):
        pass


class Broken:
    def __init__(self, spec):
        raise RuntimeError("needs a GPU")
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"user_env_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(GUESS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> PromptCodec:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_files(out)
    return PromptCodec.from_pretrained(out)


def _spec(reference: str, **task: Any) -> TaskSpec:
    return TaskSpec.model_validate({"name": "environment", "environment": reference, **task})


class ScriptedProxy:
    """Answers each `/generate` with the next scripted reply and records the contexts."""

    def __init__(self, codec: PromptCodec, replies: Sequence[str]) -> None:
        self.codec = codec
        self.replies = list(replies)
        self.contexts: list[list[int]] = []

    async def generate(self, ids: Sequence[int], sampling: Any, **kwargs: Any) -> list[int]:
        self.contexts.append(list(ids))
        return self.codec.encode_answer(self.replies.pop(0))


def test_the_class_is_built_with_the_task_spec(module: str) -> None:
    env = get_task(_spec(f"{module}:Guess", params={"limit": 15}, seed=2, maxTurns=6))
    assert is_environment(env)
    assert (env.name, env.max_turns) == ("guess", 6)
    assert env.episode(1).prompt == "guess a number from 0 to 15"


async def test_the_whitebox_agent_plays_a_user_environment(module: str, codec: PromptCodec) -> None:
    env = get_task(_spec(f"{module}:Guess"))  # instance 1: the secret is 5 of 0..7
    assert is_environment(env)
    proxy = ScriptedProxy(codec, ["3", "6", "5"])
    agent = WhiteboxAgentRollout(
        environment=env,
        codec=codec,
        client=cast(ProxyRolloutClient, proxy),
        group_size=1,
        sampling=SamplingSettings(max_new_tokens=4),
    )
    reward = await agent.play(1, session_id="s", instance_id="i", seed=0)
    assert reward == 1.0
    assert proxy.replies == []
    rendered = codec.tokenizer.decode(proxy.contexts[-1])
    assert rendered.startswith("<|user|>guess a number from 0 to 7<|end|>")
    assert "<|tool|>higher<|end|>" in rendered
    assert "<|tool|>lower<|end|>" in rendered


async def test_an_episode_that_runs_out_of_turns_scores_zero(
    module: str, codec: PromptCodec
) -> None:
    env = get_task(_spec(f"{module}:Guess", maxTurns=2))
    assert is_environment(env)
    proxy = ScriptedProxy(codec, ["0", "1"])
    agent = WhiteboxAgentRollout(
        environment=env,
        codec=codec,
        client=cast(ProxyRolloutClient, proxy),
        group_size=1,
        sampling=SamplingSettings(max_new_tokens=4),
    )
    assert await agent.play(1, session_id="s", instance_id="i", seed=0) == 0.0
    assert len(proxy.contexts) == 2


def test_the_warm_start_replays_the_user_expert(module: str, codec: PromptCodec) -> None:
    env = get_task(_spec(f"{module}:Guess"))
    turns = demonstration(env, codec, 1)
    answers = [codec.decode_completion(answer) for _, answer in turns]
    assert answers == ["3", "5"]


def test_a_single_turn_source_refuses_a_user_environment(module: str, codec: PromptCodec) -> None:
    source = TaskPrompts(get_task(_spec(f"{module}:Guess")), codec)
    with pytest.raises(TypeError, match="guess is multi-turn"):
        source.prompt_ids(0)


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ("NotAnEnvironment", r"does not implement dressage\.tasks\.base\.Environment \(missing "
         "name, max_turns, episode\\)"),
        ("Broken", r"Broken\(spec\) raised RuntimeError: needs a GPU"),
        ("Missing", r"has no attribute 'Missing'"),
    ],
)  # fmt: skip
def test_a_bad_environment_class_is_a_clear_error(
    module: str, attribute: str, message: str
) -> None:
    with pytest.raises(UserCodeError, match=r"spec\.task\.environment: .*" + message):
        get_task(_spec(f"{module}:{attribute}"))


def test_an_environment_module_that_cannot_be_imported_names_it() -> None:
    with pytest.raises(
        UserCodeError,
        match=r"cannot import module 'absent_envs_pkg\.games' of 'absent_envs_pkg\.games:Guess': "
        r"ModuleNotFoundError: No module named 'absent_envs_pkg' \(sys\.path starts with ",
    ):
        get_task(_spec("absent_envs_pkg.games:Guess"))


def test_the_environment_task_needs_its_class() -> None:
    with pytest.raises(ValidationError, match=r"task\.environment is set exactly when"):
        TaskSpec.model_validate({"name": "environment"})
