"""Model families as the proxy meets them: a tokenizer with the family's special tokens and a
chat template written for the family's prompt format as its model card documents it.

The templates are written here from the formats the cards describe (role markers, where tools
are declared, how calls and tool results are written, what happens to earlier reasoning);
they are not the checkpoints' files. The tokenizers are character-level (`tokenizers`), with
the family's markers as added tokens, special or not as in the family's own tokenizer, so a
reply's ids decode to exactly the text the family's model writes.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Calls = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    special: tuple[str, ...]
    """Added tokens the family's tokenizer marks special (skipped when decoding text)."""
    added: tuple[str, ...] = ()
    """Added tokens that are not special (Qwen's `<think>`, `<tool_call>`)."""
    eos: str = ""
    stops: tuple[str, ...] = ()
    """Further end-of-turn tokens (`generation_config.json` `eos_token_id`)."""
    bos: str | None = None
    reasoning: str = "none"
    """The reasoning parser the template implies."""
    tools: str = "hermes"
    """The tool-call parser the template implies."""
    write_reply: Callable[[str | None, str, Calls], str] = field(default=lambda r, c, k: c)
    """The text the family's model writes for (reasoning, content, calls), stop token left
    out."""
    stop_after_calls: str | None = None
    """The stop token the model ends a reply with calls with (default `eos`)."""


# --- Qwen3 (Qwen/Qwen3-8B): ChatML, <think>, Hermes-style calls, tools in the system turn;
# earlier turns' reasoning is dropped once a newer user message follows them.

QWEN3_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set content = m.content or '' %}{%- set reasoning = m.reasoning_content or '' %}"
    "{%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n'"
    " + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- for tc in m.tool_calls or [] %}"
    "{%- if (loop.first and content) or not loop.first %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' }}'
    "{{- tc.function.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def _qwen3_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    text += content
    for i, (name, arguments) in enumerate(calls):
        if i or content:
            text += "\n"
        text += (
            f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
        )
    return text


QWEN3 = Family(
    "qwen3",
    QWEN3_TEMPLATE,
    special=("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
    added=("<think>", "</think>", "<tool_call>", "</tool_call>"),
    eos="<|im_end|>",
    stops=("<|endoftext|>",),
    reasoning="qwen3",
    tools="qwen",
    write_reply=_qwen3_reply,
)

# --- Qwen3-Coder (Qwen/Qwen3-Coder-30B-A3B-Instruct): ChatML, XML calls, no reasoning.

QWEN3_CODER_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\nYou are a helpful assistant.\\n\\n# Tools\\n\\n"
    "You have access to the following functions:\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n<function>\\n<name>' + tool.function.name + '</name>' }}"
    "{%- for pname, p in (tool.function.parameters.properties or {}).items() %}"
    "{{- '\\n<parameter>\\n<name>' + pname + '</name>\\n<type>' + p.type + '</type>\\n"
    "</parameter>' }}{%- endfor %}{{- '\\n</function>' }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format:"
    "\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\n"
    "value_1\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for tc in m.tool_calls or [] %}"
    "{%- if (loop.first and m.content) or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n<function=' + tc.function.name + '>\\n' }}"
    "{%- for k, v in tc.function.arguments.items() %}"
    "{{- '<parameter=' + k + '>\\n' + (v if v is string else v | tojson) + '\\n</parameter>\\n' }}"
    "{%- endfor %}{{- '</function>\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content }}"
    "{{- '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _coder_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    text = content
    for i, (name, arguments) in enumerate(calls):
        if i or content:
            text += "\n"
        text += f"<tool_call>\n<function={name}>\n"
        for k, v in arguments.items():
            text += f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
        text += "</function>\n</tool_call>"
    return text


QWEN3_CODER = Family(
    "qwen3-coder",
    QWEN3_CODER_TEMPLATE,
    special=("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
    added=("<tool_call>", "</tool_call>"),
    eos="<|im_end|>",
    tools="qwen3_coder",
    write_reply=_coder_reply,
)

# --- Llama 3.1/3.3 Instruct (meta-llama/Llama-3.1-8B-Instruct), JSON tool calling: custom
# tools in the first user message, calls as `<|python_tag|>{json}` ended by <|eom_id|>,
# results as `ipython` turns.

LLAMA3_TEMPLATE = (
    "{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\\n' }}{%- endif %}"
    "{{- 'Cutting Knowledge Date: December 2023\\n\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- set ns = namespace(tools_shown=false) %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}"
    "{%- elif m.role == 'user' %}{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    "{%- if tools and not ns.tools_shown %}{%- set ns.tools_shown = true %}"
    "{{- 'Given the following functions, please respond with a JSON for a function call with "
    "its proper arguments that best answers the given prompt.\\n\\nRespond in the format "
    '{"name": function name, "parameters": dictionary of argument name and its value}. '
    "Do not use variables.\\n\\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}{%- endif %}"
    "{{- m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n<|python_tag|>' }}"
    "{%- for tc in m.tool_calls %}{%- if not loop.first %}{{- '; ' }}{%- endif %}"
    '{{- \'{"name": "\' + tc.function.name + \'", "parameters": \' }}'
    "{{- tc.function.arguments | tojson }}{{- '}' }}{%- endfor %}{{- '<|eom_id|>' }}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)


def _llama_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    if not calls:
        return content
    return "<|python_tag|>" + "; ".join(
        f'{{"name": "{n}", "parameters": {json.dumps(a)}}}' for n, a in calls
    )


LLAMA3 = Family(
    "llama3",
    LLAMA3_TEMPLATE,
    special=(
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    ),
    eos="<|eot_id|>",
    stops=("<|end_of_text|>", "<|eom_id|>"),
    bos="<|begin_of_text|>",
    tools="llama3",
    write_reply=_llama_reply,
    stop_after_calls="<|eom_id|>",
)

# --- Mistral (mistralai/Mistral-7B-Instruct-v0.3): tools before the last user message,
# `[TOOL_CALLS] [...]` calls, results in `[TOOL_RESULTS]` with the call's 9-character id.

MISTRAL_TEMPLATE = (
    "{%- set user_messages = messages | selectattr('role', 'equalto', 'user') | list %}"
    "{{- bos_token }}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}"
    "{%- if tools and m == user_messages[-1] %}{{- '[AVAILABLE_TOOLS] [' }}"
    "{%- for t in tools %}{{- t | tojson }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}{{- '][/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{{- '[INST] ' + m.content + '[/INST]' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '[TOOL_CALLS] [' }}"
    "{%- for tc in m.tool_calls %}"
    "{%- if tc.id is not defined or tc.id | length != 9 %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}"
    '{{- \'{"name": "\' + tc.function.name + \'", "arguments": \' }}'
    "{{- tc.function.arguments | tojson }}{{- ', \"id\": \"' + tc.id + '\"}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']' + eos_token }}"
    "{%- elif m.role == 'assistant' %}{{- m.content + eos_token }}"
    "{%- elif m.role == 'tool' %}"
    '{{- \'[TOOL_RESULTS] {"content": \' + m.content | tojson + \', "call_id": "\''
    " + m.tool_call_id + '\"}[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}"
)


def _mistral_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    if not calls:
        return content
    body = ", ".join(f'{{"name": "{n}", "arguments": {json.dumps(a)}}}' for n, a in calls)
    return f"[TOOL_CALLS] [{body}]"


MISTRAL = Family(
    "mistral",
    MISTRAL_TEMPLATE,
    special=(
        "<s>",
        "</s>",
        "[INST]",
        "[/INST]",
        "[TOOL_CALLS]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
    ),
    eos="</s>",
    bos="<s>",
    tools="mistral",
    write_reply=_mistral_reply,
)

# --- DeepSeek-R1-0528 (deepseek-ai/DeepSeek-R1-0528): V3's tool-call tokens with a fenced
# JSON block; the reasoning of earlier turns is dropped from the history.

DS_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- endif %}"
    "{%- if tools %}{{- '\\n\\n## Tools\\nYou have access to the following tools:\\n' }}"
    "{%- for t in tools %}{{- '\\n### ' + t.function.name + '\\nParameters: ' }}"
    "{{- t.function.parameters | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '\\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_call_name\\n```json\\n"
    "tool_call_arguments\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' }}{%- endif %}"
    "{%- set ns = namespace(in_tools=false) %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{%- set ns.in_tools = false %}{{- '<｜User｜>' + m.content }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- if ns.in_tools %}{{- '<｜tool▁outputs▁end｜>' }}{%- set ns.in_tools = false %}"
    "{%- endif %}"
    "{%- set content = (m.content or '').split('</think>')[-1] %}"
    "{{- '<｜Assistant｜>' + content }}"
    "{%- if m.tool_calls %}{{- '<｜tool▁calls▁begin｜>' }}"
    "{%- for tc in m.tool_calls %}"
    "{{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tc.function.name + '\\n```json\\n' }}"
    "{{- tc.function.arguments | tojson }}{{- '\\n```<｜tool▁call▁end｜>' }}{%- endfor %}"
    "{{- '<｜tool▁calls▁end｜>' }}{%- endif %}{{- '<｜end▁of▁sentence｜>' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if not ns.in_tools %}{{- '<｜tool▁outputs▁begin｜>' }}{%- set ns.in_tools = true %}"
    "{%- endif %}{{- '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if ns.in_tools %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}"
    "{%- if add_generation_prompt %}{{- '<｜Assistant｜><think>\\n' }}{%- endif %}"
)


def _ds_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    text = f"{reasoning}\n</think>\n\n" if reasoning is not None else ""
    text += content
    if calls:
        text += (
            "<｜tool▁calls▁begin｜>"
            + "".join(
                f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{json.dumps(a)}\n```<｜tool▁call▁end｜>"
                for n, a in calls
            )
            + "<｜tool▁calls▁end｜>"
        )
    return text


DEEPSEEK_R1 = Family(
    "deepseek-r1",
    DS_TEMPLATE,
    special=(
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "<｜User｜>",
        "<｜Assistant｜>",
    ),
    added=(
        "<think>",
        "</think>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁outputs▁begin｜>",
        "<｜tool▁outputs▁end｜>",
        "<｜tool▁output▁begin｜>",
        "<｜tool▁output▁end｜>",
    ),
    eos="<｜end▁of▁sentence｜>",
    bos="<｜begin▁of▁sentence｜>",
    reasoning="deepseek-r1",
    tools="deepseekv3",
    write_reply=_ds_reply,
)

# --- GLM-4.5 (zai-org/GLM-4.5): `[gMASK]<sop>`, role tokens, XML key/value calls,
# `<think>` with enable_thinking, tool results as <|observation|> turns.

GLM45_TEMPLATE = (
    "{{- '[gMASK]<sop>' }}"
    "{%- if tools %}{{- '<|system|>\\n# Tools\\n\\nYou may call one or more functions to "
    "assist with the user query.\\n\\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\\n<tools>\\n' }}"
    "{%- for t in tools %}{{- t | tojson(ensure_ascii=False) }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools>\\n\\nFor each function call, output the function name and arguments within "
    "the following XML format:\\n<tool_call>{function-name}\\n<arg_key>{arg-key-1}</arg_key>\\n"
    "<arg_value>{arg-value-1}</arg_value>\\n...\\n</tool_call>' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|user|>\\n' + m.content }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '/nothink' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>' }}"
    "{%- if m.reasoning_content %}{{- '\\n<think>' + m.reasoning_content + '</think>' }}"
    "{%- else %}{{- '\\n<think></think>' }}{%- endif %}"
    "{%- if m.content %}{{- '\\n' + m.content }}{%- endif %}"
    "{%- for tc in m.tool_calls or [] %}{{- '\\n<tool_call>' + tc.function.name + '\\n' }}"
    "{%- for k, v in tc.function.arguments.items() %}"
    "{{- '<arg_key>' + k + '</arg_key>\\n<arg_value>' }}"
    "{{- v if v is string else v | tojson(ensure_ascii=False) }}{{- '</arg_value>\\n' }}"
    "{%- endfor %}{{- '</tool_call>' }}{%- endfor %}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|observation|>' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- elif m.role == 'system' %}{{- '<|system|>\\n' + m.content }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '\\n<think></think>' }}"
    "{%- endif %}{%- endif %}"
)


def _glm_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    text = f"\n<think>{reasoning}</think>" if reasoning is not None else ""
    if content:
        text += "\n" + content
    for name, arguments in calls:
        text += f"\n<tool_call>{name}\n"
        for k, v in arguments.items():
            value = v if isinstance(v, str) else json.dumps(v)
            text += f"<arg_key>{k}</arg_key>\n<arg_value>{value}</arg_value>\n"
        text += "</tool_call>"
    return text


GLM45 = Family(
    "glm45",
    GLM45_TEMPLATE,
    special=(
        "[gMASK]",
        "<sop>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "<|observation|>",
        "<|endoftext|>",
    ),
    added=(
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<tool_response>",
        "</tool_response>",
    ),
    eos="<|endoftext|>",
    stops=("<|user|>", "<|observation|>"),
    reasoning="glm45",
    tools="glm45",
    write_reply=_glm_reply,
    stop_after_calls="<|observation|>",
)

# --- Kimi-K2-Thinking (moonshotai): `<|im_*|>` roles, tools declared in a `tool_declare`
# system turn, calls in a section with `functions.NAME:N` ids, results by that id.

KIMI_TEMPLATE = (
    "{%- if tools %}{{- '<|im_system|>tool_declare<|im_middle|>' + tools | tojson }}"
    "{{- '<|im_end|>' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|im_user|>user<|im_middle|>' + m.content + '<|im_end|>' }}"
    "{%- elif m.role == 'system' %}"
    "{{- '<|im_system|>system<|im_middle|>' + m.content + '<|im_end|>' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_assistant|>assistant<|im_middle|>' }}"
    "{{- '<think>' + (m.reasoning_content or '') + '</think>' + (m.content or '') }}"
    "{%- if m.tool_calls %}{{- '<|tool_calls_section_begin|>' }}"
    "{%- for tc in m.tool_calls %}"
    "{{- '<|tool_call_begin|>' + tc.id + '<|tool_call_argument_begin|>' }}"
    "{{- tc.function.arguments | tojson }}{{- '<|tool_call_end|>' }}{%- endfor %}"
    "{{- '<|tool_calls_section_end|>' }}{%- endif %}{{- '<|im_end|>' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_system|>tool<|im_middle|>## Return of ' + m.tool_call_id + '\\n' + m.content }}"
    "{{- '<|im_end|>' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_assistant|>assistant<|im_middle|>' }}{%- endif %}"
)


def _kimi_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    text = f"<think>{reasoning or ''}</think>{content}"
    if calls:
        text += (
            "<|tool_calls_section_begin|>"
            + "".join(
                f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{json.dumps(a)}"
                "<|tool_call_end|>"
                for i, (n, a) in enumerate(calls)
            )
            + "<|tool_calls_section_end|>"
        )
    return text


KIMI_K2 = Family(
    "kimi-k2",
    KIMI_TEMPLATE,
    special=(
        "<|im_system|>",
        "<|im_user|>",
        "<|im_assistant|>",
        "<|im_middle|>",
        "<|im_end|>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_end|>",
        "<|tool_call_argument_begin|>",
        "[EOS]",
    ),
    added=("<think>", "</think>"),
    eos="<|im_end|>",
    reasoning="kimi_k2",
    tools="kimi_k2",
    write_reply=_kimi_reply,
)

# --- gpt-oss (openai/gpt-oss-20b), harmony: system and developer messages, tools as a
# TypeScript-like `functions` namespace, channels analysis / commentary / final.

GPT_OSS_TEMPLATE = (
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
    "\\nKnowledge cutoff: 2024-06\\n\\nReasoning: ' + (reasoning_effort or 'medium') + '\\n\\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.' }}"
    "{%- if tools %}{{- '\\nCalls to these tools must go to the commentary channel: "
    "\\'functions\\'.' }}{%- endif %}{{- '<|end|>' }}"
    "{%- if tools %}{{- '<|start|>developer<|message|># Tools\\n\\n## functions\\n\\n"
    "namespace functions {\\n' }}"
    "{%- for t in tools %}{{- '\\ntype ' + t.function.name + ' = (_: ' }}"
    "{{- t.function.parameters | tojson }}{{- ') => any;\\n' }}{%- endfor %}"
    "{{- '\\n} // namespace functions<|end|>' }}{%- endif %}"
    "{%- set ns = namespace(last_final=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' and not m.tool_calls %}"
    "{%- set ns.last_final = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{- '<|start|>user<|message|>' + m.content + '<|end|>' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- if m.thinking and loop.index0 > ns.last_final %}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.thinking + '<|end|>' }}"
    "{%- endif %}"
    "{%- for tc in m.tool_calls or [] %}"
    "{{- '<|start|>assistant<|channel|>commentary to=functions.' + tc.function.name }}"
    "{{- ' <|constrain|>json<|message|>' + tc.function.arguments | tojson + '<|call|>' }}"
    "{%- endfor %}"
    "{%- if not m.tool_calls %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}{%- endif %}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|start|>functions.' + (m.name or 'tool') + ' to=assistant<|channel|>commentary"
    "<|message|>' + m.content + '<|end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)


def _harmony_reply(reasoning: str | None, content: str, calls: Calls) -> str:
    """Harmony messages; the first one's `<|start|>assistant` is the generation prompt's."""
    messages = (
        [f"<|channel|>analysis<|message|>{reasoning}<|end|>"] if reasoning is not None else []
    )
    if calls:
        name, arguments = calls[0]  # harmony writes one call per message, then stops
        messages.append(
            f"<|channel|>commentary to=functions.{name} <|constrain|>json"
            f"<|message|>{json.dumps(arguments)}"
        )
    else:
        messages.append(f"<|channel|>final<|message|>{content}")
    return "<|start|>assistant".join(messages)


GPT_OSS = Family(
    "gpt-oss",
    GPT_OSS_TEMPLATE,
    special=(
        "<|start|>",
        "<|end|>",
        "<|message|>",
        "<|channel|>",
        "<|constrain|>",
        "<|return|>",
        "<|call|>",
        "<|endoftext|>",
    ),
    eos="<|return|>",
    stops=("<|call|>", "<|endoftext|>"),
    reasoning="gpt-oss",
    tools="gpt-oss",
    write_reply=_harmony_reply,
    stop_after_calls="<|call|>",
)

FAMILIES = (QWEN3, QWEN3_CODER, LLAMA3, MISTRAL, DEEPSEEK_R1, GLM45, KIMI_K2, GPT_OSS)


def build_family(family: Family, out_dir: Path) -> Path:
    """Write the family's `tokenizer.json`, `tokenizer_config.json` and
    `generation_config.json` into `out_dir` (a checkpoint directory for `--model`)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0} | {ch: i + 1 for i, ch in enumerate(dict.fromkeys(string.printable))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in family.special])
    tokenizer.add_tokens([AddedToken(t, special=False) for t in family.added])
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config: dict[str, Any] = {"chat_template": family.template, "eos_token": family.eos}
    if family.bos is not None:
        config["bos_token"] = family.bos
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    stops = [tokenizer.token_to_id(t) for t in (family.eos, *family.stops)]
    (out_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": stops}))
    return out_dir
