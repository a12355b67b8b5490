"""Segment records: the JSON the proxy hands to the trainer side, and their `Sample`s.

A record is one segment of one trajectory, finished when its session was finalized. It holds
exactly what a training `Sample` needs and converts to one with `record_to_sample` (pure);
`sample_to_record` is the inverse. Record fields:

    session_id, parent_traj_id, instance_id, group_id, segment_index,
    prompt_tokens, response_tokens, loss_mask, rollout_log_probs,
    response_versions            one per response token (null: no version / not recorded)
    tokens, full_versions        prompt + response, one version per token
    version_spans                full_versions run-length encoded: [[version, count], ...]
    dressage_start_token_version, dressage_end_token_version
    reward, status ("finished" | "refused"), refusal (error body or null),
    closed_reason, turns, preempts, record_token_versions
"""

from __future__ import annotations

from typing import Any

from dressage.proxy.sessions import Segment, Session
from dressage.rollout.artifacts.samples import Sample, mask_nonlast_version_tokens

_IDENTITY_KEYS = ("session_id", "instance_id", "status", "closed_reason", "turns", "preempts")


def segment_record(
    session: Session,
    segment: Segment,
    *,
    reward: float | None,
    record_token_versions: bool,
) -> dict[str, Any]:
    """The record of one segment of a finalized session."""
    versions: list[str | None] = (
        list(segment.versions) if record_token_versions else [None] * len(segment.versions)
    )
    sample = Sample.build(
        prompt_tokens=segment.prompt_tokens,
        response_tokens=segment.response_tokens,
        response_versions=versions,
        rollout_log_probs=segment.logprobs,
        loss_mask=segment.loss_mask,
        reward=reward,
        group_id=session.instance_id,
        parent_traj_id=session.session_id,
        segment_index=segment.index,
    )
    record = sample_to_record(sample)
    record.update(
        session_id=session.session_id,
        instance_id=session.instance_id,
        status="refused" if session.refusal is not None else "finished",
        refusal=session.refusal.body()["error"] if session.refusal is not None else None,
        closed_reason=segment.closed_reason,
        turns=segment.turns,
        preempts=segment.preempts,
        record_token_versions=record_token_versions,
    )
    return record


def session_records(
    session: Session,
    *,
    reward: float | None,
    record_token_versions: bool,
) -> list[dict[str, Any]]:
    """Records of every segment of a closed session, in segment order."""
    return [
        segment_record(session, segment, reward=reward, record_token_versions=record_token_versions)
        for segment in session.segments
    ]


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


def record_to_sample(
    record: dict[str, Any], *, mask_nonlast_versions: bool | None = None
) -> Sample:
    """The training `Sample` of a segment record.

    Applies `mask_nonlast_version_tokens` when the record asks for it (the proxy's
    `--mask-nonlast-version-tokens`) or when `mask_nonlast_versions` says so explicitly.
    Raises `ValueError` naming the field when the record is inconsistent.
    """
    for key in ("prompt_tokens", "response_tokens", "loss_mask", "rollout_log_probs"):
        if not isinstance(record.get(key), list):
            raise ValueError(f"segment record field {key!r} must be a list")
    response_versions = record.get("response_versions")
    if response_versions is None:
        response_versions = [None] * len(record["response_tokens"])
    metadata = {k: record[k] for k in _IDENTITY_KEYS if k in record}
    sample = Sample.build(
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
    )
    mask = record.get("mask_nonlast_version_tokens", False)
    if mask_nonlast_versions is not None:
        mask = mask_nonlast_versions
    return mask_nonlast_version_tokens(sample) if mask else sample
