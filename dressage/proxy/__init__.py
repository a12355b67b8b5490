"""The rollout proxy: every generation of every agent goes through it.

It keeps one session per trajectory, records the weight version of every generated token,
resumes generations interrupted by weight updates (partial rollout) and refuses trajectories
whose version span exceeds the limit. The HTTP API is documented in `dressage.proxy.server`.

Modules: `app` (routes and lifespan), `middleware` (auth, limits, per-endpoint metrics),
`endpoints/` (SGLang `/generate`, sessions and records, control, the router API, drains),
`turns` (one model turn: plan, generate, check, record), `generation` (engine calls, pauses,
resumes), `span_rule` (the version rule), `sessions` and `records` (trajectories and their
segment records), `engine_pool` (the engines and routing among them), `upstream` (pooled
keep-alive connections to them; what is sent over them and how answers are read is the
engine contract's, `dressage.engine.wire`, shared with `dressage.engine.client`),
`background` (health, versions, expiry), `client` (the typed client agents, collectors and
the publisher use). `openai/` is the OpenAI-compatible layer (chat templates, replies, tool
calls, `/v1/chat/completions`): the core never imports it, only `app` mounts its routes (an
import contract holds this).

This package never imports torch: the proxy image does not ship it.
"""
