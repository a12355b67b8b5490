"""The `/segments` wire codec: a segment record's JSON and the training `Sample` it holds.

A record is one segment of one trajectory as the proxy hands it out (`GET /segments`). The
fields a `Sample` determines:

    group_id, parent_traj_id, segment_index, reward,
    tokens, prompt_tokens, response_tokens, response_length, loss_mask, rollout_log_probs,
    full_versions                one per token of `tokens` (null: no version)
    response_versions            one per response token
    version_spans                full_versions run-length encoded: [[version, count], ...]
    dressage_start_token_version, dressage_end_token_version
    routed_experts               MoE routing of tokens[:routed_experts_rows] as SGLang encodes
                                 it (base64 of int32 rows), or null
    routed_experts_rows

and the proxy's own fields on top (`session_id`, `instance_id`, `status`, `refusal`,
`closed_reason`, `turns`, `preempts`, `drained_tokens`, `record_token_versions`), of which
`record_to_sample` keeps the identity and accounting ones in `Sample.metadata`.
`record_to_sample(sample_to_record(s)) == s`.
"""

from __future__ import annotations

from typing import Any

from dressage.data.expert_routing import RoutedExperts
from dressage.data.samples import Sample

_METADATA_KEYS = (
    "session_id",
    "instance_id",
    "status",
    "closed_reason",
    "turns",
    "preempts",
    "drained_tokens",
)


def sample_to_record(sample: Sample) -> dict[str, Any]:
    """The record fields a `Sample` determines (identity, tokens, versions, reward)."""
    record = sample.to_dict()
    prompt_length = sample.prompt_length
    record.update(
        prompt_tokens=list(sample.tokens[:prompt_length]),
        response_tokens=list(sample.tokens[prompt_length:]),
        response_versions=list(sample.response_versions),
    )
    return record


def record_to_sample(record: dict[str, Any]) -> Sample:
    """The training `Sample` of a segment record; `ValueError` naming the field at fault."""
    for key in ("prompt_tokens", "response_tokens", "loss_mask", "rollout_log_probs"):
        if not isinstance(record.get(key), list):
            raise ValueError(f"segment record field {key!r} must be a list")
    response_versions = record.get("response_versions")
    if response_versions is None:
        response_versions = [None] * len(record["response_tokens"])
    elif not isinstance(response_versions, list):
        raise ValueError("segment record field 'response_versions' must be a list or null")
    metadata = {k: record[k] for k in _METADATA_KEYS if k in record}
    routes = record.get("routed_experts")
    if routes is not None and not isinstance(routes, str):
        raise ValueError("segment record field 'routed_experts' must be a base64 string or null")
    try:
        routed = (
            None
            if routes is None
            else RoutedExperts.from_base64(routes, int(record.get("routed_experts_rows", 0)))
        )
    except ValueError as exc:
        raise ValueError(f"segment record field 'routed_experts': {exc}") from None
    return Sample.build(
        prompt_tokens=record["prompt_tokens"],
        response_tokens=record["response_tokens"],
        response_versions=response_versions,
        rollout_log_probs=record["rollout_log_probs"],
        loss_mask=record["loss_mask"],
        reward=record.get("reward"),
        group_id=record.get("group_id", record.get("instance_id")),
        parent_traj_id=record.get("parent_traj_id", record.get("session_id")),
        segment_index=int(record.get("segment_index", 0)),
        metadata=metadata,
        routed_experts=routed,
    )
