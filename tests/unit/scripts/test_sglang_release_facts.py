"""`scripts/sglang_release_facts.py` decides each kind of evidence from a release's source
without importing it: here a wheel-shaped zip holding a few lines of each file it reads."""

from __future__ import annotations

import zipfile
from pathlib import Path

from dressage.api.sglang import (
    Function,
    MetricLabel,
    NullDefault,
    RequestField,
    Route,
    SamplingParam,
    ServerArg,
)
from scripts.sglang_release_facts import Source, has

FILES = {
    "sglang/srt/managers/io_struct.py": """
@dataclass
class BaseReq:
    rid: str = None

@dataclass
class GenerateReqInput(BaseReq):
    text: str = None
    return_routed_experts: bool = False
""",
    "sglang/srt/sampling/sampling_params.py": """
class SamplingParams:
    def __init__(self, max_new_tokens=128, temperature=None, stop_regex=None):
        self.temperature = temperature if temperature is not None else 1.0
        if self.stop_regex is None:
            pass
""",
    "sglang/srt/server_args.py": """
@dataclass
class ServerArgs:
    enable_return_routed_experts: bool = False
""",
    "sglang/srt/arg_groups/fields/observability.py": """
class ObservabilityFields:
    uvicorn_access_log_exclude_prefixes: list = None
""",
    "sglang/srt/entrypoints/http_server.py": """
@app.get("/model_info")
async def model_info(): ...

app.add_api_route("/begin_weight_update", begin, methods=["POST"])
""",
    "sglang/srt/utils/weight_versions.py": """
def add_weight_versions_to_meta_info(meta_info):
    return meta_info
""",
    "sglang/srt/managers/scheduler_metrics_mixin.py": """
labels = {"model_name": name, "engine_type": engine_type, "tp_rank": 0, "moe_ep_rank": 0}
""",
    "sglang/srt/managers/tokenizer_manager.py": """
labels = {"model_name": self.server_args.served_model_name, "engine_type": engine_type}
""",
    "sglang/srt/entrypoints/encode_server.py": """
labels = {"model_name": self.server_args.served_model_name, "dp_rank": 0}
""",
    "sglang/srt/observability/metrics_collector.py": """
class TokenizerMetricsCollector:
    def __init__(self, labels):
        self.prompt_tokens_total = Counter(labelnames=[*labels, "is_streaming"])
""",
}


def test_each_kind_of_evidence_is_read_from_the_source(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in FILES.items():
            archive.writestr(name, text)
    source = Source(wheel)
    present = [
        RequestField("GenerateReqInput", "return_routed_experts"),
        RequestField("GenerateReqInput", "rid"),
        SamplingParam("stop_regex"),
        NullDefault("temperature"),
        NullDefault("stop_regex"),
        Route("/model_info"),
        Route("/begin_weight_update"),
        ServerArg("enable_return_routed_experts"),
        ServerArg("uvicorn_access_log_exclude_prefixes"),
        Function("add_weight_versions_to_meta_info"),
        MetricLabel("scheduler", "moe_ep_rank"),
        MetricLabel("tokenizer", "engine_type"),
        MetricLabel("per_request", "is_streaming"),
    ]
    absent = [
        RequestField("GenerateReqInput", "routed_experts_start_len"),
        RequestField("PauseGenerationReqInput", "mode"),
        SamplingParam("sampling_seed"),
        NullDefault("max_new_tokens"),
        Route("/end_weight_update"),
        ServerArg("enable_deterministic_inference"),
        Function("generate_contract_error"),
        MetricLabel("scheduler", "dp_rank"),
        MetricLabel("tokenizer", "dp_rank"),  # the encoder server's, not the tokenizer's
        MetricLabel("per_request", "priority"),
    ]
    assert [e for e in present if not has(source, e)] == []
    assert [e for e in absent if has(source, e)] == []
