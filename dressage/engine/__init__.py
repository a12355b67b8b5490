"""The engine contract: Dressage talks to inference engines only through SGLang's HTTP API.

`client.EngineClient` speaks that API (shapes in `protocol`, which release has what in
`sglang_support`); SGLang servers serve it on a cluster and the embedded CPU engine
(`dressage engine serve`, modules `model`, `sampling`, `scheduler`, `pacing`, `server`,
`endpoints`) serves the same subset locally, as the SGLang release it is told to play does
(`releases`).
This package's top level imports no torch.
"""

from dressage.engine.client import EngineClient
from dressage.engine.errors import (
    EngineError,
    EngineRequestError,
    EngineServerError,
    EngineUnavailable,
    EngineVersionError,
)
from dressage.engine.protocol import (
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    MetaInfo,
    ModelInfo,
    SamplingParams,
    UpdateWeightsResult,
    WeightVersionSpan,
)

__all__ = [
    "EngineClient",
    "EngineError",
    "EngineRequestError",
    "EngineServerError",
    "EngineUnavailable",
    "EngineVersionError",
    "FinishReason",
    "GenerateRequest",
    "GenerateResponse",
    "MetaInfo",
    "ModelInfo",
    "SamplingParams",
    "UpdateWeightsResult",
    "WeightVersionSpan",
]
