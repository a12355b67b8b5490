"""The engine contract: Dressage talks to inference engines only through SGLang's HTTP API.

`client.EngineClient` speaks that API (shapes in `protocol`, which release has what in
`sglang_support`, which reads the one table of release facts, `dressage.api.sglang.FEATURES`;
errors in `errors`; the weight-update group and its flattened buckets in `weight_group` and
`flat_bucket`). SGLang servers serve it on a cluster; the embedded CPU engine
(`dressage.engine.embedded`, `dressage engine serve`) serves the same subset locally, as the
SGLang release it is told to play does. The contract never imports the embedded engine (an
import contract in `pyproject.toml` holds it), and this package's top level imports no torch.
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
