"""The rollout proxy: every generation of every agent goes through it.

It keeps one session per trajectory, records the weight version of every generated token,
resumes generations interrupted by weight updates (partial rollout) and refuses trajectories
whose version span exceeds the limit. The HTTP API is documented in `dressage.proxy.server`.

Modules: `app` (routes and lifespan), `middleware` (auth, limits, per-endpoint metrics),
`endpoints/` (SGLang `/generate`, OpenAI chat, sessions and records, control), `turns` (one
model turn: plan, generate, check, record), `generation` (engine calls, pauses, resumes),
`staleness` (the version rule), `sessions` and `records` (trajectories and their segment
records), `routing` and `upstream` (engines and the connections to them), `chat` (chat
templates), `client` (the typed client agents, collectors and the publisher use).

This package never imports torch: the proxy image does not ship it.
"""
