"""The embedded engine's endpoints, by family: `generation` (`/generate`, the health routes),
`weights` (updates from disk and broadcast, weight-update sessions, `/flush_cache`) and
`control` (pause, continue, abort, the version, model and server info, `/ready`).

Each endpoint is a function `(state, request) -> Answer` over the engine's `EngineState`
(`state`); answers and the guard they share are in `common`. `dressage.engine.embedded.server` holds
the route table, which the release profile (`dressage.engine.embedded.release_profiles`) selects
from.
"""
