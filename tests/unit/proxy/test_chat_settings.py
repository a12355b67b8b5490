"""The job's chat-format settings reach the proxy: `spec.rollout.reasoningParser` and
`toolCallParser` (SGLang's names) become the proxy's `--reasoning-parser` and
`--tool-call-parser` through the settings function the operator's ConfigMap feeds."""

from __future__ import annotations

import pytest

from dressage.api import JobValidationError, validate_job
from dressage.api.proxy_settings import proxy_settings
from dressage.proxy.config import ProxyConfig
from dressage.proxy.openai.chat import load_chat_tokenizer
from dressage.proxy.openai.reply import ReplyFormat


def _job(**rollout: object) -> dict[str, object]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "chat"},
        "spec": {"model": {"source": "builtin:tiny"}, "rollout": rollout},
    }


def test_the_jobs_parsers_become_the_proxys() -> None:
    job = validate_job(_job(reasoningParser="qwen3", toolCallParser="qwen3_coder"))
    config = ProxyConfig(engine_urls=["http://e:1"], **proxy_settings(job))
    assert (config.reasoning_parser, config.tool_call_parser) == ("qwen3", "qwen3_coder")
    tok = load_chat_tokenizer(
        "builtin:tiny",
        reasoning_parser=config.reasoning_parser,
        tool_call_parser=config.tool_call_parser,
    )
    assert tok.reply_format == ReplyFormat("qwen3", "qwen3_coder")


def test_by_default_both_come_from_the_chat_template() -> None:
    job = validate_job(_job())
    assert (job.spec.rollout.reasoning_parser, job.spec.rollout.tool_call_parser) == (
        "auto",
        "auto",
    )


@pytest.mark.parametrize(
    ("rollout", "field"),
    [
        ({"reasoningParser": "qwen9"}, "spec.rollout.reasoningParser"),
        ({"toolCallParser": "pythonic"}, "spec.rollout.toolCallParser"),
    ],
)
def test_a_parser_the_proxy_does_not_read_is_refused_naming_the_field(
    rollout: dict[str, object], field: str
) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_job(**rollout))
    assert field in str(info.value)
