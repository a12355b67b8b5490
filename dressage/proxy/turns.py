"""One model turn of a session, from plan to record; both generation endpoints run it.

`run_turn` plans the turn against the session's current segment (marking the session busy),
generates it under the proxy's version rule (`Generator`), and then either commits it to
the session or, when the rule refuses its versions, stops the trajectory: the refusal is
kept on the session (every later generation gets it again), counted by reason and answered.
Any other failure releases the session with nothing recorded.
"""

from __future__ import annotations

import time
from typing import Any

from dressage.proxy.errors import ProxyError
from dressage.proxy.pieces import Generation
from dressage.proxy.sessions import Session, TurnPlan
from dressage.proxy.span_rule import StalenessRefusal
from dressage.proxy.state import ProxyState


async def run_turn(
    state: ProxyState,
    session: Session,
    input_ids: list[int],
    sampling_params: dict[str, Any],
    *,
    force_new_segment: str | None = None,
    routed_experts: bool = False,
    extra_body: dict[str, Any] | None = None,
) -> tuple[TurnPlan, Generation, int]:
    """Plan, generate, check and record one turn; returns the plan, the generation and the
    segment index it was recorded in.

    The engines are asked for the tokens' routed experts when the proxy records them
    (`--record-routed-experts`) or the caller asks (`routed_experts`); the segment keeps them
    either way. `extra_body` fields go to the engine with every piece of the turn
    (`return_indexer_topk`).
    """
    generator = state.generator
    assert generator is not None, "generations run only while the app serves"
    clock = state.clock
    plan = session.begin_turn(input_ids, clock(), force_new_segment=force_new_segment)
    started = time.perf_counter()
    try:
        gen = await generator.run(
            session,
            input_ids,
            sampling_params,
            routed_experts=routed_experts or state.config.record_routed_experts,
            extra_body=extra_body,
        )
    except StalenessRefusal as exc:
        refusal = ProxyError(exc.status, exc.error_name, str(exc), detail=exc.detail)
        session.refuse(refusal, clock())
        state.metrics.refusals.labels(exc.error_name).inc()
        raise refusal from None
    except BaseException:
        session.end_turn(clock())
        raise
    if gen.engine_latency is not None and not gen.preempts:
        # Interrupted turns are left out: their time includes the weight-update pause.
        overhead = time.perf_counter() - started - gen.engine_latency
        state.metrics.generation_overhead.observe(max(0.0, overhead))
    segment = session.commit_turn(
        plan,
        gen.output_ids,
        gen.logprobs,
        gen.versions,
        clock(),
        preempts=gen.preempts,
        drained_tokens=gen.drained_tokens,
        routed_experts=gen.routed_experts,
    )
    return plan, gen, segment.index
