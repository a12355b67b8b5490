"""`ProxyConfig`: every setting of the proxy, typed and documented.

The CLI flags of `dressage proxy` derive from this model (see `dressage.proxy.cli`), and
`dressage.api.proxy_settings` derives defaults from an `AsyncRLJob` (the operator hashes the
same settings into the proxy's pods), so a job manifest and the command line configure the
same fields.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dressage.api.bounds import DEFAULT_MAX_SESSIONS
from dressage.api.chat_formats import ReasoningParserName, ToolCallParserName
from dressage.proxy.metrics import DEFAULT_PER_ENGINE_MAX
from dressage.proxy.sessions import DEFAULT_EVICT_IDLE_S


class ProxyConfig(BaseModel):
    """Settings of one proxy process."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    engine_urls: list[str] = Field(default_factory=list)
    """Base URLs of the inference engines (SGLang servers or embedded engines), fixed for the
    proxy's life. Give this or `engine_urls_file`."""
    engine_urls_file: Path | None = None
    """A file listing the engines' base URLs (one per line or comma-separated; blank lines and
    `#` comments ignored), read again every `health_interval_s`: engines listed later join the
    pool, engines no longer listed leave it (their requests in flight finish). The operator
    points it at the job's ConfigMap, which the kubelet keeps current in the pod."""
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = Field(default=8000, ge=0, le=65535)
    """Port to listen on; 0 picks a free port."""
    partial_rollout: bool = False
    """Resume generations interrupted by a weight update from their partial output under the
    new weights (`--dressage-partial-rollout`)."""
    record_token_versions: bool = False
    """Record the weight version of every generated token in the segment records."""
    record_routed_experts: bool = False
    """Ask the engines for the experts every token was routed to (MoE models; SGLang 0.5.7 or
    later started with `--enable-return-routed-experts`) and record them in the segment
    records, for routing replay in the trainer."""
    max_partial_rollout_preempts: int | None = Field(default=None, ge=0)
    """Most version switches one partial-rollout trajectory may span (N allows N+1 versions);
    beyond it the proxy answers 502 `partial_rollout_staleness_exceeded`. Unset: no limit."""
    max_concurrency: int = Field(default=256, ge=1)
    """Generations admitted at once; beyond it requests get 429 `too_many_requests`."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Largest request body accepted; larger ones get 413 `request_too_large`."""
    session_ttl_s: float = Field(default=3600.0, gt=0)
    """Sessions idle this long are dropped, and finished segments not read this long after
    their session was finalized are dropped too."""
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=1)
    """Live sessions kept at most (about 2 KB each when idle). A new session at the cap takes
    the place of the least recently used one idle for `session_evict_idle_s` (counted in
    `dressage_proxy_evicted_sessions_total`); when none is, it gets 429 `too_many_sessions`
    with `Retry-After`."""
    session_evict_idle_s: float = Field(default=DEFAULT_EVICT_IDLE_S, ge=0)
    """How long a session must have been idle before a new one at `max_sessions` may evict it."""
    per_engine_metrics_max_engines: int = Field(default=DEFAULT_PER_ENGINE_MAX, ge=0)
    """Series labelled by `engine` (`dressage_proxy_engine_healthy`,
    `dressage_proxy_engine_busy_total`) are exported while the pool holds at most this many
    engines; beyond, the pool is counted by health (`dressage_proxy_engines{state}`) and busy
    refusals for all engines together (`engine="all"`). Raise it to opt in on a larger fleet."""
    auth_token: str | None = None
    """Bearer token required on every endpoint but `/health` and `/metrics` (also read from
    the `DRESSAGE_PROXY_TOKEN` environment variable)."""
    model: str | None = None
    """Model path or `builtin:tiny`: its `tokenizer.json` and chat template serve
    `/v1/chat/completions`. Without it only the token-level `/generate` is available."""
    reasoning_parser: ReasoningParserName = "auto"
    """How the model's reasoning is told from its answer for OpenAI `reasoning_content`
    (SGLang's `--reasoning-parser` names: `qwen3`, `deepseek-r1`, `glm45`, `gpt-oss`, ...;
    `none` leaves it in the content, `auto` picks from the chat template)."""
    tool_call_parser: ToolCallParserName = "auto"
    """How the model's tool calls are read from its output for OpenAI `tool_calls` (SGLang's
    `--tool-call-parser` names: `hermes`, `qwen`, `qwen3_coder`, `llama3`, `mistral`,
    `deepseekv3`, `glm45`, `kimi_k2`, `gpt-oss`, ...; `none` leaves them as text, `auto`
    picks from the chat template)."""
    model_name: str | None = None
    """Model id listed by `/v1/models`; defaults to `model`."""
    engine_timeout_s: float = Field(default=600.0, gt=0)
    """Longest wait for one engine answer before 504 `engine_timeout`."""
    engine_busy_timeout_s: float = Field(default=60.0, gt=0)
    """How long a generation keeps retrying, with backoff, engines that answer 503 because
    their request queue is full (SGLang `--max-queued-requests`) before 503 `engine_busy`."""
    health_interval_s: float = Field(default=5.0, gt=0)
    """Seconds between engine health checks."""
    pause_timeout_s: float = Field(default=900.0, gt=0)
    """Longest time a generation waits for `/continue_generation` before 503
    `pause_timeout`."""
    lora_base_version: str | None = Field(default=None, min_length=1)
    """A LoRA job's base version (`v0`): every later version is a LoRA adapter of that name on
    the engines, which each generation names (`lora_path`) and its tokens are stamped with;
    engines are routed to whatever version they report. Unset: full-weight versions."""

    @field_validator("engine_urls")
    @classmethod
    def _strip_urls(cls, urls: list[str]) -> list[str]:
        return normalize_engine_urls(urls)

    @model_validator(mode="after")
    def _check_cross_fields(self) -> ProxyConfig:
        if self.engine_urls and self.engine_urls_file is not None:
            raise ValueError(
                "engine_urls (--engine-urls) and engine_urls_file (--engine-urls-file) exclude "
                "each other: give the fixed list or the file"
            )
        if not self.engine_urls and self.engine_urls_file is None:
            raise ValueError(
                "the proxy needs its engines: engine_urls (--engine-urls) or engine_urls_file "
                "(--engine-urls-file)"
            )
        if self.max_partial_rollout_preempts is not None and not self.partial_rollout:
            raise ValueError(
                "max_partial_rollout_preempts (--max-partial-rollout-preempts) needs partial "
                "rollout (--dressage-partial-rollout)"
            )
        return self

    @property
    def served_model_name(self) -> str:
        return self.model_name or self.model or "dressage"


def normalize_engine_urls(urls: list[str]) -> list[str]:
    """Engine base URLs without surrounding blanks and trailing slashes; ValueError for one
    that is not http(s) or for a repeat."""
    out = []
    for url in urls:
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"engine URL {url!r} must start with http:// or https://")
        out.append(url)
    if len(set(out)) != len(out):
        raise ValueError("engine URLs must be distinct")
    return out


def parse_engine_urls(text: str) -> list[str]:
    """The engine URLs listed in the text of an engine URLs file (see
    `ProxyConfig.engine_urls_file`); ValueError naming a bad entry."""
    items: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        items.extend(item for item in line.replace(",", " ").split() if item)
    return normalize_engine_urls(items)


def read_engine_urls(path: Path) -> list[str]:
    """The engine URLs in the file at `path`; OSError when it cannot be read, ValueError
    (naming the file) when an entry is not an engine URL."""
    text = path.read_text(encoding="utf-8")
    try:
        return parse_engine_urls(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
