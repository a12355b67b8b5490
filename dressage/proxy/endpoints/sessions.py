"""Sessions and their records: `/sessions`, `/sessions/{id}`, `/sessions/{id}/finalize`,
`/segments`.

Finalizing a session closes it and turns its segments into records
(`dressage.proxy.records`), queued until the trainer side reads them from `/segments`.
"""

from __future__ import annotations

from typing import Any

from dressage.asgi import Answer, HttpRequest
from dressage.data.versions import version_span
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.endpoints.fields import session_ids
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.records import session_records
from dressage.proxy.sessions import Session
from dressage.proxy.state import ProxyState

_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


async def create_session(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    session_id, instance_id = session_ids(request, body)
    session = state.store.get_or_create(session_id, instance_id, state.clock())
    return json_response(session.summary(), 201)


async def get_session(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    return json_response(_open_session(state, request).summary())


async def delete_session(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    session_id = request.path_params["session_id"]
    if not state.store.delete(session_id):
        raise ProxyError(404, errors.NOT_FOUND, f"no session {session_id!r}")
    return json_response({"deleted": session_id})


async def finalize(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    reward = body.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
        raise invalid("reward must be a number or null", "reward")
    session = _open_session(state, request)
    if session.busy:
        raise ProxyError(
            409,
            errors.SESSION_BUSY,
            f"session {session.session_id!r} has a generation in flight; finalize after it",
        )
    records = finalize_session(state, session, None if reward is None else float(reward))
    return json_response(
        {
            "session_id": session.session_id,
            "instance_id": session.instance_id,
            "segments": len(records),
            "status": "refused" if session.refusal is not None else "finished",
        }
    )


def finalize_session(
    state: ProxyState, session: Session, reward: float | None
) -> list[dict[str, Any]]:
    """Close `session` and queue its segment records for `/segments`; returns them."""
    session.close()
    records = session_records(
        session, reward=reward, record_token_versions=state.config.record_token_versions
    )
    for segment in session.segments:
        state.metrics.version_span.observe(version_span(segment.versions))
    state.store.finalize(session.session_id, records, state.clock())
    return records


async def segments(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    instance_id = request.query_params.get("instance_id")
    drain = _BOOLEANS.get(request.query_params.get("drain", "true").lower())
    if drain is None:
        raise invalid("drain must be true or false", "drain")
    records = state.store.read_finished(instance_id, drain=drain)
    return json_response({"segments": records})


def _open_session(state: ProxyState, request: HttpRequest) -> Session:
    session_id = request.path_params["session_id"]
    session = state.store.get(session_id)
    if session is None:
        raise ProxyError(404, errors.NOT_FOUND, f"no open session {session_id!r}")
    return session
