"""What the operator does per SGLang release (`spec.inference.sglangVersion`): pure decisions.

Which release has what is read from the table of release facts (`dressage.api.sglang.FEATURES`):
`/model_info` (`MODEL_INFO_ROUTE`) and the access-log exclusion (`ACCESS_LOG_EXCLUDE`).

- The engine's liveness and readiness route (`engine_live_check`): one the HTTP process answers
  from the tokenizer manager's own fields, with no round trip to the scheduler (so it keeps
  answering while generation is paused for a weight update) and without logging anything per
  call (a probe every 10 s must not fill the engine's log).
- Which routine requests stay out of the engine's access log (`quiet_access_log_args`): the
  probes, the proxy's health and version checks and Prometheus' scrape, where the release can
  leave them out.
- Whether the release is untested (`check`): a job may name a release newer than the newest
  tested one (`dressage.api.sglang`); the job then carries the condition
  `SGLangReleaseUntested=True` naming the tested range, and one Warning Event is posted when
  it becomes so.
"""

from __future__ import annotations

from dataclasses import dataclass

from dressage.api.sglang import (
    MODEL_INFO_ROUTE,
    SGLANG_TESTED_RANGE,
    has_access_log_exclusion,
    supports,
    untested_release_message,
)
from dressage.api.status import Condition, ConditionType

CONDITION = ConditionType.SGLANG_RELEASE_UNTESTED
REASON_UNTESTED = "NewerThanTested"
REASON_TESTED = "InTestedRange"

ENGINE_GENERATE_CHECK = "/health_generate"
"""The startup probe's route, in every release: `/health` and `/health_generate` are one
handler (`entrypoints/http_server.py` `health_generate`, 0.5.2 and 0.5.23). It answers 503
while the server starts, then submits a 1-token generation and polls every second, for up to
`SGLANG_HEALTH_CHECK_TIMEOUT` (default 20 s), answering 200 once the scheduler responds, so
even a healthy server takes about 1 s. While generation is paused for a weight update that
generation waits: the check blocks, then answers 503. (0.5.23's `/health` skips the
generation only when `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION` is turned off, default on;
`/health_generate` always generates.)"""

LIVE_CHECK_BEFORE_MODEL_INFO = "/get_model_info"
"""The live route before 0.5.6. 0.5.2 `http_server.py`:

    @app.get("/get_model_info")
    async def get_model_info():
        result = {
            "model_path": _global_state.tokenizer_manager.model_path,
            ...
            "weight_version": _global_state.tokenizer_manager.server_args.weight_version,
        }
        return result

Fields of the HTTP process, nothing awaited, nothing logged. (`/get_server_info` awaits
`tokenizer_manager.get_internal_state()`, a round trip to the scheduler that a weight update
can hold up; `/get_weight_version`, the other such route, is gone by 0.5.23.)"""
LIVE_CHECK = "/model_info"
"""The live route from 0.5.6 on. 0.5.23 `http_server.py`:

    @app.get("/get_model_info")
    async def get_model_info():
        \"\"\"Get the model information (deprecated - use /model_info instead).\"\"\"
        logger.warning(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
            "Please use '/model_info' instead."
        )
        return await model_info()

    @app.get("/model_info")
    async def model_info():
        model_config = _global_state.tokenizer_manager.model_config
        result = {
            "model_path": _global_state.tokenizer_manager.model_path,
            ...
            "weight_version": _global_state.tokenizer_manager.config_value("weight_version"),
            ...
        }
        return msgspec_to_builtins(result)

`config_value` reads the manager's own field or the process's config (`tokenizer_manager.py`),
so `/model_info` still answers from the HTTP process alone, while the old route logs a
warning on every call. (`/server_info`, like `/get_server_info`, awaits the scheduler's
internal state. 0.5.23's `/ready` answers 503 while generation is paused: `is_ready()` is
`not self.is_pause and self.is_healthy()`, and `pause_generation` sets `is_pause`, so it would
mark every engine unready during each weight update.)"""


def engine_live_check(version: str) -> str:
    """The liveness and readiness route of an engine running SGLang `version`."""
    if supports(version, MODEL_INFO_ROUTE):
        return LIVE_CHECK
    return LIVE_CHECK_BEFORE_MODEL_INFO


QUIET_ACCESS_LOG_PREFIXES = ("/health", LIVE_CHECK, "/metrics")
"""Paths polled on a schedule, not by users: the startup probe and the proxy's health check
(`/health`, `/health_generate`: one prefix), the liveness and readiness probes and the version
reads (`/model_info`), and Prometheus' scrape (`/metrics`). Each is a line in uvicorn's access
log per call at SGLang's default `--log-level info` unless excluded."""


def quiet_access_log_args(version: str) -> list[str]:
    """The engine flags that keep the routine polls out of the access log, on a release that
    has `--uvicorn-access-log-exclude-prefixes` (`ACCESS_LOG_EXCLUDE`); none before. The job model
    reserves the flag (`dressage.api.reserved.OPERATOR_ENGINE_FLAGS`): a job's `extraArgs`
    cannot replace the list."""
    if not has_access_log_exclusion(version):
        return []
    return ["--uvicorn-access-log-exclude-prefixes", *QUIET_ACCESS_LOG_PREFIXES]


@dataclass(frozen=True)
class ReleaseCheck:
    """`SGLangReleaseUntested` for one cycle, and whether to post its Warning Event."""

    untested: bool
    reason: str
    message: str
    warn: bool
    """Post a Warning Event: the job just became untested, or names another untested release."""


def check(version: str, previous: Condition | None) -> ReleaseCheck:
    """The condition for a job naming SGLang `version`, given the condition it had (None on
    the first cycle). The Event is posted once per transition, never every cycle."""
    message = untested_release_message(version)
    if message is None:
        in_range = f"SGLang {version} is in the tested range ({SGLANG_TESTED_RANGE})"
        return ReleaseCheck(False, REASON_TESTED, in_range, warn=False)
    again = previous is not None and previous.status == "True" and previous.message == message
    return ReleaseCheck(True, REASON_UNTESTED, message, warn=not again)
