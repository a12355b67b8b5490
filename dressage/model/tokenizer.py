"""The project's character-level tokenizer, built offline with the `tokenizers` library.

Every printable ASCII character is one token and the chat-role markers are special tokens, so the
vocabulary is small (about 100 ids) and stable: the same `vocab` always yields the same ids. The
result is saved as a standard `tokenizer.json` plus `tokenizer_config.json` (with a chat template)
that `transformers.AutoTokenizer` and SGLang load unchanged.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|end|>"
UNK_TOKEN = "<|unk|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, *ROLE_TOKENS)
"""Special tokens in id order: pad is 0, bos 1, eos 2, unk 3, then the role markers."""

DEFAULT_VOCAB: tuple[str, ...] = tuple(
    string.digits + string.ascii_lowercase + string.ascii_uppercase + string.punctuation + " \n\t"
)
"""Plain (non-special) tokens: digits, letters, punctuation and arithmetic symbols, whitespace."""

CHAT_TEMPLATE = (
    "{% if tools %}<|system|>tools:"
    "{% for tool in tools %}{% set f = tool['function'] if 'function' in tool else tool %}"
    " {{ f['name'] }}({{ ((f['parameters'] or {})['properties'] or {}) | list | join(',') }})"
    "{% endfor %}<|end|>\n{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{{ '<tool_call>' + ({'name': call['function']['name'],"
    " 'arguments': call['function']['arguments']} | tojson) + '</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
"""Renders `[{"role": "user", "content": "1+1="}]` as `<|user|>1+1=<|end|>\n<|assistant|>`.

Roles are system, user, assistant and tool; an assistant turn ends with the eos token `<|end|>`.
Tools, compact for a character-level model, come first as one system line listing each
function with its parameter names (`<|system|>tools: calculator(expression)<|end|>`); an
assistant's `tool_calls` follow its content in the Hermes syntax the proxy parses,
`<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`, and a tool
result is a `<|tool|>` turn.
"""


def build_tokenizer_files(out_dir: Path, vocab: Sequence[str] | None = None) -> int:
    """Write `tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json` into
    `out_dir`; return the vocabulary size (special tokens included)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    plain = list(DEFAULT_VOCAB if vocab is None else vocab)
    for token in plain:
        if len(token) != 1:
            raise ValueError(f"vocab entry {token!r} is not a single character")
    if len(set(plain)) != len(plain):
        raise ValueError("vocab has duplicate entries")
    ids = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *plain])}
    tokenizer = Tokenizer(models.WordLevel(vocab=ids, unk_token=UNK_TOKEN))
    # One token per character: split on every character (newlines included) and keep it.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))

    special_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": UNK_TOKEN,
        "additional_special_tokens": list(ROLE_TOKENS),
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        **special_map,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    return len(ids)
