"""LoRA against the SGLang release this run of the tier imports: the adapter routes Dressage
calls are routes of the release, the bodies it sends build the release's own request classes
(`managers/io_struct.py` `LoadLoRAAdapterReqInput`, `UnloadLoRAAdapterReqInput`, and
`GenerateReqInput.lora_path`), and the LoRA flags the operator starts engines with parse with
the release's own `ServerArgs` parser into the fields they mean."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from dressage_operator import children

from dressage.api import load_job, validate_job
from dressage.engine import lora
from dressage.engine.protocol import GenerateRequest

pytest.importorskip(
    "sglang", reason="SGLang is not importable: the tier runs per release, sglang-compat.sh"
)

from tests.contract.support import sglang_routes

pytestmark = pytest.mark.contract

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-lora.yaml"


def test_the_adapter_routes_are_routes_of_the_release() -> None:
    routes = sglang_routes()
    assert ("POST", lora.LOAD_LORA_ADAPTER) in routes
    assert ("POST", lora.UNLOAD_LORA_ADAPTER) in routes


def test_the_bodies_build_the_releases_request_classes() -> None:
    from sglang.srt.managers.io_struct import (
        GenerateReqInput,
        LoadLoRAAdapterReqInput,
        UnloadLoRAAdapterReqInput,
    )

    load = LoadLoRAAdapterReqInput(**lora.load_body("v3", "/data/run/weights/v3"))
    assert (load.lora_name, load.lora_path, load.pinned) == ("v3", "/data/run/weights/v3", False)
    assert UnloadLoRAAdapterReqInput(**lora.unload_body("v1")).lora_name == "v1"
    body = GenerateRequest(input_ids=[1, 2], lora_path="v3").to_json()
    assert GenerateReqInput(**body).lora_path == "v3"


def test_a_lora_jobs_engine_command_parses_into_the_lora_settings(sglang_release: str) -> None:
    from sglang.srt.server_args import ServerArgs

    wire = load_job(EXAMPLE).to_wire()
    spec = {**wire["spec"], "inference": {"sglangVersion": sglang_release}}  # type: ignore[dict-item]
    job = validate_job({**wire, "spec": spec})
    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(children.engine_command(job)[3:])
    lora_spec = job.spec.model.lora
    assert lora_spec is not None
    assert args.enable_lora is True
    assert args.max_lora_rank == lora_spec.rank
    assert args.lora_target_modules == list(lora_spec.target_modules)
    assert args.max_loras_per_batch == 3
