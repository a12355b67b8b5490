"""The rollout proxy's HTTP API and parameters (an ASGI app, see `dressage.asgi`;
`create_app(config)`).

Agents never talk to engines directly: every generation goes through here, which keeps one
session per trajectory, records the version of every generated token, resumes generations
interrupted by weight updates (partial rollout) and enforces the version-span limit.

Parameters (`dressage proxy` flags, fields of `dressage.proxy.config.ProxyConfig`, added to a
parser by `add_arguments`), among them the staleness controls:

- `--dressage-partial-rollout`: generations interrupted by a weight update resume from their
  partial output;
- `--record-token-versions`: segment records carry the weight version of every generated
  token (else their versions are null);
- `--max-partial-rollout-preempts N`: a partial-rollout trajectory may switch versions at most
  N times (span at most N+1 versions; `dressage.proxy.span_rule`).

Code: `dressage.proxy.app` (the app, its routes and lifespan), `dressage.proxy.middleware`
(auth, admission, body, metrics around every endpoint), `dressage.proxy.turns` (one model
turn), `dressage.proxy.endpoints` (one module per endpoint family).

Sessions. A session is one trajectory. Its id comes from the `X-Session-Id` header, else the
body field `session_id` (`/generate`), else `user` or `metadata.session_id` (chat), else the
path prefix `/s/{session_id}/...` (for agents whose only setting is a base URL:
`http://proxy/s/<id>/v1`). `X-Instance-Id` (body `instance_id`, chat `metadata.instance_id`)
names the prompt instance (the GRPO group). A session is created by its first request.
`/generate` also takes slime's and miles' requests as they send them: without a session id,
the `X-SMG-Routing-Key` header names the session, and without that the request is a
trajectory of its own, finalized once its turn is recorded.

Endpoints (JSON bodies; errors are `{"error": {"type", "code", "message", "param", "detail"}}`
with the stable names of `dressage.proxy.errors`):

`POST /generate` (whitebox agents): SGLang's body `{"input_ids": [...], "sampling_params":
{...}, "return_logprob": bool, "stream": bool, "return_routed_experts": bool}` (a streamed
answer is SGLang's event stream, sent once the turn is recorded; routed experts are passed to
and from the engine, see `dressage.proxy.endpoints.sglang`). `input_ids` must extend the
session's current segment (its prompt, the model's outputs and what was appended after them) to
continue it; anything else starts a new segment. Answers SGLang's response (`text`,
`output_ids`, `meta_info` with `finish_reason`, `weight_version`, `weight_versions` spans,
`output_token_logprobs`, `prompt_tokens`, `completion_tokens`, and `e2e_latency`, the seconds
the proxy took for the request once its body was read) plus `"dressage": {"session_id",
"instance_id", "segment_index", "new_segment" (null or why a segment started), "versions" (one
per output token), "preempts", "engine", "engine_latency" (the engines' own `e2e_latency`
summed over the turn, null when they do not report it)}`. The difference, per model turn, is
the histogram `dressage_proxy_generation_overhead_seconds`.

`POST /v1/chat/completions`, `POST /s/{session_id}/v1/chat/completions` (OpenAI-compatible,
`stream` true or false; `n` must be 1; needs `--model`), `GET /v1/models`,
`GET /s/{session_id}/v1/models`. Messages are rendered with the model's chat template
incrementally (see `dressage.proxy.openai.chat`): user and tool tokens get loss mask 0, model
tokens 1.
A history rewrite, a change of `tools`, or a template that renders the earlier messages
differently now (Qwen3 drops the reasoning of turns before the last user message) starts a
new segment. The reply is read by the model family's reasoning and tool-call parsers
(`--reasoning-parser`, `--tool-call-parser`, SGLang's names; `dressage.proxy.openai.reply`) into
`reasoning_content`, `content` and `tool_calls`; `chat_template_kwargs` reach the template;
`tool_choice` is `none`, `auto`, `required` or a named function (decoding is never
constrained). A streamed answer is sent once the turn is generated (the turn may be resumed
across weight updates), as OpenAI deltas read token by token.

`POST /sessions` `{"session_id", "instance_id"}` creates a session ahead of its agent.
`GET /sessions/{id}` summarises it. `POST /sessions/{id}/finalize` `{"reward": float|null}`
closes it and queues its segment records. `DELETE /sessions/{id}` forgets it, records included.
`GET /segments?instance_id=I&drain=true|false` returns `{"segments": [record, ...]}`, the
records of finalized sessions (of instance I, or all), and with `drain=true` (the default)
removes them. Records are described in `dressage.proxy.records`.

`POST /pause_generation` `{"mode": "abort"|"in_place"|"retract"}` (default `abort`) and
`POST /continue_generation`, for the trainer around a weight update. Pause closes the proxy's
gate (new generations wait) and pauses every engine; with mode `abort` the engines abort
in-flight generations, which then wait for continue. With `--dressage-partial-rollout` each
resumes from its partial output (prompt + generated tokens, remaining budget) and its tokens
keep their own versions; without it the partial output is discarded and the turn is generated
again from its prompt after continue. Each interruption counts as a preempt.
Answers `{"paused": bool, "epoch": n, "engines": {url: "ok" | error}}`; 502 `engine_error`
when an engine did not take the command (an engine that was unhealthy when commanded, such as
one still starting, or that took no connection, as one whose process is gone, is not routed to
and does not count; its entry says so).

`POST /continue_generation` may carry `{"weight_version": V}`: the version the engines now
serve. From then on, and after `POST /dressage/weight_version {"weight_version": V}`, only
engines that report V (on `/model_info` or `/get_weight_version`, by release) are routed to;
an engine that joined the job or missed an update is held out until the weight publisher
brought it to V. `GET /dressage/engines`: the current version and each engine (`url`,
`healthy`, `routable`, `draining`, `weight_version`, `inflight`, `last_error`,
`sglang_version`). With `--engine-urls-file` the engine set follows that file while the proxy
runs (see `dressage.proxy.config`).

`POST /dressage/engines/drain {"url", "timeout_s"?, "abort"?}`: the engine takes no new turn,
its generations in flight are aborted and continue on other engines (partial rollout keeps
their tokens), and the answer comes once none is left on it (504 `drain_timeout` otherwise);
with `"abort": false` it only stops routing there and answers at once (the first step of a
drain over several proxy replicas). `POST /dressage/engines/undrain {"url"}` routes to it again
(`dressage.proxy.drain`).

Several replicas of the proxy may serve one engine set (`spec.proxy.replicas`): the client
sends every call of a prompt group to one replica (`dressage.proxy.affinity`) and fans the
control calls out to all of them (`dressage.proxy.client`); `/pause_generation {"mode",
"engines": false}` closes a replica's gate without pausing the engines, so that every gate is
closed before any engine is paused; each replica then pauses one shard of the engines
(`"shard": [i, n]`) and later continues it with its gate left closed (`"gate": false`), and
`/continue_generation {"engines": false}` opens every gate once every shard is continued.
Each replica follows the same engine list; the gateway's `/workers` changes the list of the
one replica it reaches.

`GET /workers`, `POST /workers {"url"}`, `DELETE /workers/{id}` and `POST /abort_request`
(SGLang Model Gateway's, for slime and miles pointed at the proxy as their router): the
engines in the gateway's shape, registering and removing one, and an abort sent to every
engine (`dressage.proxy.endpoints.router`).

`GET /health` (no auth): engines, pause state, sessions. `GET /metrics` (no auth): Prometheus.

Refusals (the trajectory is stopped; any later generation of it gets the same answer):

- 502 `partial_rollout_staleness_exceeded`, `detail = {"versions", "version_span",
  "version_switches", "max_preempts", "max_version_span"}`: with
  `--max-partial-rollout-preempts N`, the session's earlier response versions merged with the
  turn's would switch versions more than N times.
- 409 `version_changed_without_partial_rollout`, `detail = {"versions", "session_versions",
  "candidate_versions"}`: without partial rollout, the turn came from another weight version
  than the trajectory's earlier turns.

Other errors: 400 `invalid_json`, `invalid_request` (naming the field), `missing_session_id`
(chat);
401 `unauthorized`; 404 `not_found`; 405 `method_not_allowed`; 409 `session_busy` (one
generation at a time per session), `session_finalized`; 413 `request_too_large`; 429
`too_many_requests` (more than `--max-concurrency` generations in flight); 502 `engine_failed`
(an engine died mid-turn after tokens were received, or no engine could take over),
`engine_error`; 503 `no_healthy_engine`, `pause_timeout`; 504 `engine_timeout`,
`drain_timeout`.
"""

from __future__ import annotations

from dressage.proxy.app import create_app
from dressage.proxy.cli import add_arguments, build_config
from dressage.proxy.config import ProxyConfig
from dressage.proxy.state import ProxyState

__all__ = ["ProxyConfig", "ProxyState", "add_arguments", "build_config", "create_app"]
