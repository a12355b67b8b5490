"""Segment records: the JSON the proxy hands to the trainer side (`GET /segments`).

A record is one segment of one trajectory, finished when its session was finalized. Its sample
fields are encoded by the data layer's wire codec (`dressage.data.codec`: `sample_to_record`,
and `record_to_sample` on the trainer side); this module adds the session's fields. Record
fields:

    session_id, parent_traj_id, instance_id, group_id, segment_index,
    prompt_tokens, response_tokens, loss_mask, rollout_log_probs,
    response_versions            one per response token (null: no version / not recorded)
    tokens, full_versions        prompt + response, one version per token
    version_spans                full_versions run-length encoded: [[version, count], ...]
    dressage_start_token_version, dressage_end_token_version
    reward, status ("finished" | "refused"), refusal (error body or null),
    closed_reason, turns, preempts, record_token_versions
    drained_tokens               response tokens generated on an engine that was then drained,
                                 kept as their turn moved to another engine
    routed_experts, routed_experts_rows   the rollout's MoE routing of tokens[:rows] (SGLang's
                                          base64 int32 rows), null when not recorded
"""

from __future__ import annotations

from typing import Any

from dressage.data.codec import record_to_sample, sample_to_record
from dressage.data.samples import Sample
from dressage.proxy.sessions import Segment, Session

__all__ = ["record_to_sample", "sample_to_record", "segment_record", "session_records"]


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
        routed_experts=segment.routed_experts,
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
        drained_tokens=segment.drained_tokens,
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
