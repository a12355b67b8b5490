"""Conversation encoding: a multi-turn episode grows by token ids only and matches the chat
template, and the warm start's demonstrations use exactly the rollout's contexts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.job import TaskSpec
from dressage.model.tokenizer import build_tokenizer_files
from dressage.tasks import get_task
from dressage.tasks.codec import Conversation, PromptCodec, demonstration

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> PromptCodec:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_files(out)
    return PromptCodec.from_pretrained(out)


def _render(codec: PromptCodec, messages: list[dict[str, str]]) -> str:
    return str(
        codec.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    )


def test_a_conversation_equals_the_chat_template_of_its_messages(codec: PromptCodec) -> None:
    conversation = Conversation(codec, "find the key; boxes 1-3")
    conversation.add_turn(codec.encode_answer("open 2"), "box 2: key")
    conversation.add_turn(codec.encode_answer("open 1"), "box 1: mug")
    messages = [
        {"role": "user", "content": "find the key; boxes 1-3"},
        {"role": "assistant", "content": "open 2"},
        {"role": "tool", "content": "box 2: key"},
        {"role": "assistant", "content": "open 1"},
        {"role": "tool", "content": "box 1: mug"},
    ]
    assert conversation.ids == codec.encode_text(_render(codec, messages))


def test_an_output_cut_off_by_the_budget_is_closed_with_end_of_sequence(
    codec: PromptCodec,
) -> None:
    cut = Conversation(codec, "q")
    cut.add_turn(codec.encode_text("open"), "no")
    whole = Conversation(codec, "q")
    whole.add_turn(codec.encode_answer("open"), "no")
    assert cut.ids == whole.ids


@settings(max_examples=50, deadline=None)
@given(
    turns=st.lists(
        st.tuples(st.text("open take123 ", max_size=8), st.booleans(), st.text("box:mug 12")),
        max_size=5,
    )
)
def test_every_turn_extends_the_previous_tokens_exactly(
    codec: PromptCodec, turns: list[tuple[str, bool, str]]
) -> None:
    conversation = Conversation(codec, "find the pen; boxes 1-2")
    for output, ended, observation in turns:
        before = list(conversation.ids)
        ids = codec.encode_answer(output) if ended else codec.encode_text(output)
        conversation.add_turn(ids, observation)
        assert conversation.ids[: len(before)] == before
        assert conversation.ids[len(before) : len(before) + len(ids)] == ids


def test_an_episode_demonstration_is_the_expert_in_the_rollout_context(
    codec: PromptCodec,
) -> None:
    env = get_task(TaskSpec(name="household"))
    for index in range(20):
        turns = demonstration(env, codec, index)
        replay = env.episode(index)
        for n, (context, answer) in enumerate(turns):
            assert answer[-1] == codec.eos_id
            if n:  # each context extends the previous turn's context and answer
                previous, previous_answer = turns[n - 1]
                assert context[: len(previous) + len(previous_answer)] == (
                    previous + previous_answer
                )
            step = replay.step(codec.decode_completion(answer))
        assert step.done
        assert step.reward == 1.0
        assert codec.decode_completion(turns[-1][1]).startswith("take ")


def test_a_single_turn_demonstration_is_the_prompt_and_its_answer(codec: PromptCodec) -> None:
    task = get_task(TaskSpec(name="arithmetic"))
    prompt = task.prompt(3)
    assert demonstration(task, codec, 3) == [
        (codec.encode_prompt(prompt), codec.encode_answer(prompt.answer))
    ]
