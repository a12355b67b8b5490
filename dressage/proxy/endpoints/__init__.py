"""The proxy's endpoints, by family: `sglang` (`/generate`), `openai_chat`
(`/v1/chat/completions`, `/v1/models`), `sessions` (`/sessions...`, `/segments`) and `control`
(`/pause_generation`, `/continue_generation`, `/health`, `/metrics`).

Each endpoint is a function `(state, request, body) -> Answer` (see
`dressage.proxy.middleware`, which handles auth, admission, the body and metrics around it);
`dressage.proxy.app` holds the route table.
"""
