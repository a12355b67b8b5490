"""The embedded engine's HTTP server: SGLang's HTTP API subset, as one SGLang release serves it.

`EngineServer(config)` plays release `config.sglang_release`
(`dressage.engine.embedded.release_profiles`): it
serves exactly that profile's routes (anything else is 404, a route of another release
included), logs the release's deprecation warning on every call of a deprecated alias, and its
endpoints (`dressage.engine.embedded.endpoints`: `generation`, `weights`, `control`) answer as that
release does. Handlers only validate, hand work to the scheduler thread and wait for its answer,
so the event loop is never blocked by a forward pass or a checkpoint read. No request body can
crash the server. Until the first weights are loaded, the health routes and `/generate` answer
503.

Every release's engine also serves `/metrics`, as SGLang does with `--enable-metrics` (which
the operator always passes): SGLang's own metric names and labels for the release it plays
(`dressage.engine.embedded.metrics`), beside the profile's routes.

The HTTP loop shares the process, and the interpreter lock, with the scheduler thread's forward
passes: whatever CPU a request costs here is taken from generation when requests arrive in a
burst. So the per-request path is kept lean: the framework-free ASGI layer the proxy also
uses, and orjson.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from tokenizers import Tokenizer

from dressage.asgi import Answer, App, HttpRequest, Route, StreamAnswer
from dressage.engine.embedded.config import EngineConfig
from dressage.engine.embedded.endpoints import control, generation, lora, weights
from dressage.engine.embedded.endpoints.common import guarded, not_routed
from dressage.engine.embedded.endpoints.state import EngineState
from dressage.engine.embedded.metrics import CONTENT_TYPE, EngineMetrics
from dressage.engine.embedded.model import ModelShape, load_weights, parameter_shapes
from dressage.engine.embedded.release_profiles import (
    ReleaseProfile,
    deprecation_warning,
    profile_for,
)
from dressage.engine.embedded.scheduler import Scheduler

__all__ = ["EngineConfig", "EngineServer", "route_table"]

log = logging.getLogger("dressage.engine")

Endpoint = Callable[[EngineState, HttpRequest], Awaitable[Answer | StreamAnswer]]

ENDPOINTS: dict[str, Endpoint] = {
    "/generate": generation.generate,
    "/health": generation.health,
    "/health_generate": generation.health_generate,
    "/update_weights_from_disk": weights.update_weights_from_disk,
    "/init_weights_update_group": weights.init_weights_update_group,
    "/destroy_weights_update_group": weights.destroy_weights_update_group,
    "/begin_weight_update": weights.begin_weight_update,
    "/end_weight_update": weights.end_weight_update,
    "/update_weights_from_distributed": weights.update_weights_from_distributed,
    "/flush_cache": weights.flush_cache,
    "/load_lora_adapter": lora.load_lora_adapter,
    "/unload_lora_adapter": lora.unload_lora_adapter,
    "/pause_generation": control.pause_generation,
    "/continue_generation": control.continue_generation,
    "/abort_request": control.abort_request,
    "/get_weight_version": control.weight_version,
    "/model_info": control.model_info,
    "/get_model_info": control.model_info,
    "/server_info": control.server_info,
    "/get_server_info": control.server_info,
    "/ready": control.ready,
}
"""Every route the embedded engine can serve; a profile picks its own."""


def route_table(profile: ReleaseProfile) -> list[tuple[str, Endpoint, tuple[str, ...]]]:
    """`(path, endpoint, methods)` for every route of `profile`, deprecated aliases wrapped
    to log the release's warning; KeyError for a profile route no endpoint serves."""
    methods: dict[str, list[str]] = {}
    for method, path in sorted(profile.routes):
        methods.setdefault(path, []).append(method)
    table = []
    for path, allowed in sorted(methods.items()):
        endpoint = ENDPOINTS[path]
        replacement = profile.deprecated.get(path)
        if replacement is not None:
            endpoint = _deprecated(endpoint, deprecation_warning(path, replacement))
        table.append((path, endpoint, tuple(allowed)))
    return table


def _deprecated(endpoint: Endpoint, warning: str) -> Endpoint:
    async def warned(state: EngineState, request: HttpRequest) -> Answer | StreamAnswer:
        log.warning("%s", warning)
        return await endpoint(state, request)

    return warned


class EngineServer:
    """One embedded engine: the scheduler, the tokenizer and the HTTP app around them."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        profile = profile_for(config.sglang_release)
        shape = ModelShape.from_checkpoint(config.model_path)
        tokenizer = Tokenizer.from_file(str(config.model_path / "tokenizer.json"))
        limit = shape.max_position_embeddings
        context_length = min(config.context_length or limit, limit)
        scheduler = Scheduler(
            shape=shape,
            tokenizer=tokenizer,
            seed=config.seed,
            max_batch_size=config.max_batch_size,
            context_length=context_length,
            weight_version=config.weight_version,
            min_step_interval_s=config.min_step_interval_ms / 1000,
            device=config.device,
        )
        self.state = EngineState(
            config=config,
            profile=profile,
            shape=shape,
            tokenizer=tokenizer,
            context_length=context_length,
            scheduler=scheduler,
            expected=parameter_shapes(shape),
            label=config.weight_version,
        )
        self.metrics = EngineMetrics(scheduler, config.model_source, profile.release)
        scheduler.on_finish = self.metrics.finished
        routes = [
            Route(path, guarded(functools.partial(endpoint, self.state)), allowed)
            for path, endpoint, allowed in route_table(profile)
        ]
        routes.append(Route("/metrics", guarded(self._serve_metrics), ("GET",)))
        self.app = App(routes, fallback=not_routed, lifespan=self._lifespan)

    async def _serve_metrics(self, request: HttpRequest) -> Answer:
        return Answer(self.metrics.exposition(), content_type=CONTENT_TYPE)

    @property
    def profile(self) -> ReleaseProfile:
        return self.state.profile

    @property
    def fatal_error(self) -> str | None:
        return self.state.fatal_error

    @property
    def on_fatal(self) -> Callable[[], None] | None:
        return self.state.on_fatal

    @on_fatal.setter
    def on_fatal(self, callback: Callable[[], None] | None) -> None:
        self.state.on_fatal = callback

    async def wait_loaded(self) -> None:
        await self.state.loaded.wait()

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        state = self.state
        state.scheduler.start()
        if not self.config.start_unloaded:
            task = asyncio.create_task(self._initial_load())
            state.background.add(task)
            task.add_done_callback(state.background.discard)
        try:
            yield
        finally:
            for task in list(state.background):
                task.cancel()
            await asyncio.to_thread(state.scheduler.stop)
            for group in state.groups.values():
                group.close()

    async def _initial_load(self) -> None:
        state = self.state
        try:
            loaded = await asyncio.to_thread(
                load_weights, self.config.model_path, state.shape, self.config.device
            )
        except Exception as exc:
            state.fatal_error = f"loading {self.config.model_path} failed: {exc}"
            log.error("%s", state.fatal_error)
            if state.on_fatal is not None:
                state.on_fatal()
            return
        await asyncio.wrap_future(state.scheduler.swap_weights(loaded, None, abort_all=False))
        state.loaded.set()
