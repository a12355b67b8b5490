"""Test workers of the orchestration layer (needs the `dev` extra's test models).

`python -m dressage_testkit.orchestrator ARGS` is `dressage_testkit.trainer`'s data-parallel
worker (same arguments) whose `--engine-url` step publishes the trained weights from the whole
gang to a real engine, as the training loop's collective publish does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dressage.weights.collective import CollectiveFollower, CollectivePublisher
from dressage.weights.engines import FixedEngines
from dressage_testkit.trainer import ddp_worker


def publish_to_engine(trainer: Any, env: Any, engine_url: str, out: Path) -> None:
    """Publish `trainer`'s weights to one engine from a gang (the `--engine-url` step of
    `dressage_testkit.trainer.ddp_worker`): every rank gathers each parameter
    (`CollectiveFollower` on ranks other than 0), rank 0 sends over a gloo weight-update group
    (`CollectivePublisher`) as version `v-gang`; each rank records how many tensors it was
    handed in `OUT/published-rank<R>.json`.."""
    import asyncio
    import json

    handed = 0

    def weights() -> Any:
        nonlocal handed
        for item in trainer.iter_publishable():
            handed += 1
            yield item

    async def publish() -> None:
        if env.is_main:
            publisher = CollectivePublisher(
                FixedEngines([engine_url]),
                weights=weights,
                master_address="127.0.0.1",
                master_port=0,
                backend="gloo",
                bucket_bytes=4096,
                update_timeout_s=120.0,
            )
            try:
                await publisher.publish(Path(), "v-gang")
            finally:
                await publisher.aclose()
        else:
            await CollectiveFollower(weights).publish(Path(), "v-gang")

    asyncio.run(publish())
    (out / f"published-rank{env.rank}.json").write_text(json.dumps({"tensors": handed}))


def gang_publish_worker(argv: list[str] | None = None) -> int:
    """`ddp_worker` with the gang publish as its `--engine-url` step."""
    return ddp_worker(argv, publish=publish_to_engine)


if __name__ == "__main__":
    from dressage.trainer.distributed import exit_process

    raise SystemExit(exit_process(gang_publish_worker()))
