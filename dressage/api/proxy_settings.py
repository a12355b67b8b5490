"""What the rollout proxy takes from a job: one function that the proxy and the operator call.

`dressage proxy --config job.yaml` starts from these settings (explicit flags win), and the
operator hashes the same settings into the proxy's pod template, so that a change of any of
them, and only of them, restarts the proxy: it reads `job.yaml` once, when it starts. The keys
are `dressage.proxy.config.ProxyConfig` field names (a test keeps them so).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from dressage.api.bounds import DEFAULT_MAX_SESSIONS
from dressage.api.job import AsyncRLJob
from dressage.api.rl import SpanLimitPolicy


class ProxyJobSettings(TypedDict):
    """The `ProxyConfig` fields a job implies (engine URLs are not part of a job)."""

    partial_rollout: bool
    record_token_versions: bool
    max_partial_rollout_preempts: int | None
    max_concurrency: int
    model: str
    reasoning_parser: NotRequired[str]
    tool_call_parser: NotRequired[str]
    """Each parser is present only when the job names one (not `auto`, the proxy's default):
    a job that leaves both to the chat template keeps the settings, and so the proxy's restart
    hash, it had before the fields existed."""
    max_sessions: NotRequired[int]
    """Present only when the job sets another cap than the default (`DEFAULT_MAX_SESSIONS`), so
    a job that leaves it keeps the restart hash it had before the field existed."""
    lora_base_version: NotRequired[str]
    """Present only for a LoRA job (`model.lora`): the base's version label, `v0`."""
    record_routed_experts: NotRequired[bool]
    """Present, and true, only when `rollout.routingReplay` is not `off`: a job without routing
    replay keeps the settings (and the proxy's restart hash) it had before the field existed."""


def proxy_settings(job: AsyncRLJob) -> ProxyJobSettings:
    """The proxy's settings from a job: partial rollout (the rollout mode or the proxy's own
    flag), token-version recording, the partial-rollout span limit, admission, the model
    whose tokenizer serves chat completions (`model.tokenizer`, else `model.source`) and how
    its replies are read (`rollout.reasoningParser`, `rollout.toolCallParser`), and whether
    it records the experts every token was routed to (`rollout.routingReplay`)."""
    spec = job.spec
    settings: ProxyJobSettings = {
        "partial_rollout": spec.partial_rollout,
        "record_token_versions": spec.proxy.record_token_versions,
        # `mask_old_tokens` keeps every trajectory: the proxy never refuses, the batch masks.
        "max_partial_rollout_preempts": (
            None
            if spec.staleness.span_limit_policy is SpanLimitPolicy.MASK_OLD_TOKENS
            else spec.staleness.span_limit
        ),
        "max_concurrency": spec.proxy.max_concurrency,
        "model": spec.model.tokenizer or spec.model.source,
    }
    if spec.rollout.reasoning_parser != "auto":
        settings["reasoning_parser"] = spec.rollout.reasoning_parser
    if spec.rollout.tool_call_parser != "auto":
        settings["tool_call_parser"] = spec.rollout.tool_call_parser
    if spec.proxy.max_sessions != DEFAULT_MAX_SESSIONS:
        settings["max_sessions"] = spec.proxy.max_sessions
    if spec.rollout.routing_replay != "off":
        settings["record_routed_experts"] = True
    if spec.model.lora is not None:
        settings["lora_base_version"] = "v0"  # `dressage.data.versions.version_label(0)`
    return settings
