"""Prompt and completion encoding shared by the collector and the warm start.

Both must render a task prompt into exactly the same token ids, or the warm start would teach
a format the rollout never shows. A prompt is one user message rendered with the model's chat
template (generation prompt appended); the policy answers and ends its turn with end-of-sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dressage.tasks.base import Prompt, Task


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
        """The prompt as the policy sees it (chat template with the generation prompt)."""
        messages = [{"role": "user", "content": prompt.text}]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return str(text)
        return prompt.text

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        ids = self.tokenizer.encode(self.prompt_text(prompt), add_special_tokens=False)
        return [int(i) for i in ids]

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
    """A task's prompts as token ids and its reward on generated ids (the collector's source)."""

    def __init__(self, task: Task, codec: PromptCodec) -> None:
        self.task = task
        self.codec = codec

    def prompt_ids(self, index: int) -> list[int]:
        return self.codec.encode_prompt(self.task.prompt(index))

    def reward(self, index: int, output_ids: Sequence[int]) -> float:
        return self.task.reward(self.task.prompt(index), self.codec.decode_completion(output_ids))
