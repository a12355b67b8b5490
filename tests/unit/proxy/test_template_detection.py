"""The parsers a chat template implies (`auto`), by SGLang 0.5.23's detection rules
(`srt/parser/template_detection.py`), and the reply text each family is read from."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.proxy.openai.chat import ChatTokenizer
from tests.chat_families import FAMILIES, GPT_OSS, MISTRAL, QWEN3, Family, build_family


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_each_familys_template_implies_its_parsers(family: Family, tmp_path: Path) -> None:
    tok = ChatTokenizer(build_family(family, tmp_path))
    assert (tok.reply_format.reasoning, tok.reply_format.tools) == (family.reasoning, family.tools)


@pytest.mark.parametrize(
    ("family", "reply", "read"),
    [
        # The stop token is not text; Qwen's markers are plain tokens anyway.
        (QWEN3, "<think>a</think>b<|im_end|>", "<think>a</think>b"),
        # Mistral's `[TOOL_CALLS]` is a special token, kept: it is the syntax.
        (
            MISTRAL,
            '[TOOL_CALLS] [{"name": "f", "arguments": {}}]</s>',
            '[TOOL_CALLS] [{"name": "f", "arguments": {}}]',
        ),
        # Every harmony marker is special and kept, the stop token included.
        (
            GPT_OSS,
            "<|channel|>final<|message|>hi<|return|>",
            "<|channel|>final<|message|>hi<|return|>",
        ),
    ],
)
def test_a_reply_is_read_with_its_syntaxs_special_tokens_and_without_the_others(
    family: Family, reply: str, read: str, tmp_path: Path
) -> None:
    tok = ChatTokenizer(build_family(family, tmp_path))
    ids = tok.encode(reply)
    assert tok.decode_reply(ids) == read
    pieces = tok.reply_pieces(ids)
    assert "".join(pieces) == read
    assert len(pieces) > 1  # one piece per token that adds text


def test_generation_config_stop_tokens_end_a_turn(tmp_path: Path) -> None:
    tok = ChatTokenizer(build_family(GPT_OSS, tmp_path))
    ids = [tok.tokenizer.token_to_id(t) for t in ("<|return|>", "<|call|>", "<|endoftext|>")]
    assert tok.stop_token_ids == ids
