"""The proxy's endpoints, by family: `sglang` (`/generate`), `sessions` (`/sessions...`,
`/segments`), `control` (`/pause_generation`, `/continue_generation`, `/health`, `/metrics`),
`router` (`/workers`, `/abort_request`) and `drain`. The OpenAI chat endpoints
(`/v1/chat/completions`, `/v1/models`) are `dressage.proxy.openai.endpoint`.

Each endpoint is a function `(state, request, body) -> Answer` (see
`dressage.proxy.middleware`, which handles auth, admission, the body and metrics around it);
`dressage.proxy.app` holds the route table.
"""
