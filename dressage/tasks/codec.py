"""Prompt, completion and conversation encoding shared by the rollout and the warm start.

Both must render a task into exactly the same token ids, or the warm start would teach a format
the rollout never shows. A prompt is one user message rendered with the model's chat template
(generation prompt appended); the policy answers and ends its turn with end-of-sequence. In a
multi-turn episode the conversation grows by token ids only (`Conversation`): the policy's
output ids as generated, then the environment's observation rendered as a tool message and the
next generation prompt. Earlier tokens are never re-tokenized, so every turn's input extends the
previous turn's exactly, which is what the proxy needs to keep one segment per trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dressage.tasks.base import (
    Environment,
    Prompt,
    Scored,
    Task,
    is_environment,
    score,
    scored,
)


class PromptCodec:
    """Wraps a Hugging Face tokenizer loaded from a checkpoint directory."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        if not isinstance(eos, int):
            raise ValueError("the model's tokenizer defines no eos_token_id")
        self.eos_id: int = eos

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> PromptCodec:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(model_dir)))

    def prompt_text(self, prompt: Prompt) -> str:
        """The prompt as the policy sees it: its messages (or its text as one user message)
        through the chat template with the generation prompt, or its text as is when raw."""
        if prompt.raw:
            return prompt.text
        if prompt.messages is not None:
            return self.messages_text(prompt.messages)
        return self.user_text(prompt.text)

    def messages_text(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Chat messages rendered with the chat template and the generation prompt; without a
        template, their contents one per line."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=True, tokenize=False
            )
            return str(text)
        return "\n".join(m["content"] for m in messages)

    def user_text(self, message: str) -> str:
        """One user message rendered with the chat template and the generation prompt."""
        messages = [{"role": "user", "content": message}]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return str(text)
        return message

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        return self.encode_text(self.prompt_text(prompt))

    def encode_user(self, message: str) -> list[int]:
        """Token ids of one user message as the first turn of a conversation."""
        return self.encode_text(self.user_text(message))

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` as is (special-token markers included, nothing added)."""
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def observation_text(self, observation: str) -> str:
        """What follows a finished policy turn: the template's separator after an assistant
        turn, the observation as a tool message, and the next assistant generation prompt."""
        if not getattr(self.tokenizer, "chat_template", None):
            return f"\n{observation}\n"
        tool = [{"role": "tool", "content": observation}]
        rendered = self.tokenizer.apply_chat_template(
            tool, add_generation_prompt=True, tokenize=False
        )
        return self._turn_separator() + str(rendered)

    def _turn_separator(self) -> str:
        marker = "\x00"
        assistant = [{"role": "assistant", "content": marker}]
        text = str(self.tokenizer.apply_chat_template(assistant, tokenize=False))
        after = text.split(marker, 1)[1]
        eos = str(self.tokenizer.eos_token)
        return after.split(eos, 1)[1] if eos in after else after

    def encode_answer(self, answer: str) -> list[int]:
        """Token ids of a complete answer turn: the answer text then end-of-sequence."""
        ids = self.tokenizer.encode(answer, add_special_tokens=False)
        return [int(i) for i in ids] + [self.eos_id]

    def decode_completion(self, ids: Sequence[int]) -> str:
        """Response text up to (not including) the first end-of-sequence token."""
        out: list[int] = []
        for i in ids:
            if i == self.eos_id:
                break
            out.append(int(i))
        return str(self.tokenizer.decode(out, skip_special_tokens=True))


class TaskPrompts:
    """A task's prompts as token ids and its reward on generated ids (the collector's source).

    It also carries an environment to the whitebox agent (`dressage.agents.whitebox`), which
    plays its episodes; an environment has no single prompt or reward, so both methods refuse.
    """

    def __init__(self, task: Task | Environment, codec: PromptCodec) -> None:
        self.task = task
        self.codec = codec

    def prompt_ids(self, index: int) -> list[int]:
        return self.codec.encode_prompt(self._single_turn().prompt(index))

    def reward(self, index: int, output_ids: Sequence[int]) -> float:
        task = self._single_turn()
        return task.reward(task.prompt(index), self.codec.decode_completion(output_ids))

    async def areward(self, index: int, output_ids: Sequence[int]) -> float:
        """`reward` as the rollout awaits it: the task's own `areward` when it has one (a
        user's reward function, run with a timeout off the event loop), else the task's rule,
        which is instant."""
        task = self._single_turn()
        return await score(task, task.prompt(index), self.codec.decode_completion(output_ids))

    async def ascored(self, index: int, output_ids: Sequence[int]) -> Scored:
        """`areward` with the reward's named parts and failure reason (`Scored`)."""
        task = self._single_turn()
        return await scored(task, task.prompt(index), self.codec.decode_completion(output_ids))

    def _single_turn(self) -> Task:
        if is_environment(self.task):
            raise TypeError(
                f"{self.task.name} is multi-turn: the whitebox agent plays its episodes"
            )
        return self.task


class Conversation:
    """The token ids of one multi-turn episode, grown turn by turn without re-tokenizing."""

    def __init__(self, codec: PromptCodec, first_message: str) -> None:
        self.codec = codec
        self.ids: list[int] = codec.encode_user(first_message)

    def add_turn(self, output_ids: Sequence[int], observation: str) -> None:
        """Append the policy's output and the environment's answer to it.

        An output cut off by the token budget gets an end-of-sequence appended, so the next turn
        starts from a well-formed history (the proxy records it with loss mask 0).
        """
        self.ids.extend(int(i) for i in output_ids)
        if not output_ids or output_ids[-1] != self.codec.eos_id:
            self.ids.append(self.codec.eos_id)
        self.ids.extend(self.codec.encode_text(self.codec.observation_text(observation)))


def demonstration(
    task: Task | Environment, codec: PromptCodec, index: int
) -> list[tuple[list[int], list[int]]]:
    """`(context ids, answer ids)` for every policy turn of a good episode on prompt `index`.

    A single-turn task gives one pair (the prompt and the reference answer); an environment
    replays its expert, building the context exactly as the rollout does.
    """
    if not is_environment(task):
        prompt = task.prompt(index)
        return [(codec.encode_prompt(prompt), codec.encode_answer(prompt.answer))]
    episode = task.episode(index)
    conversation = Conversation(codec, episode.prompt)
    turns: list[tuple[list[int], list[int]]] = []
    for _ in range(task.max_turns):
        answer = codec.encode_answer(episode.expert_action())
        turns.append((list(conversation.ids), answer))
        step = episode.step(codec.decode_completion(answer))
        if step.done:
            break
        conversation.add_turn(answer, step.observation)
    return turns
