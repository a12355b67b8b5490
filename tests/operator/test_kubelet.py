"""The test kubelet's pure parts: SGLang's command as the embedded engine's, and Kubernetes'
`$(VAR)` expansion (what `test_cluster_run.py` relies on to start the operator's pods)."""

from __future__ import annotations

import pytest
from dressage_operator import children
from dressage_operator.config import OperatorConfig

from dressage.api import validate_job
from dressage.engine import cli as engine_cli

from .kubelet import _expand, sglang_as_embedded


def _engine_command(**inference: object) -> list[str]:
    job = validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "k"},
            "spec": {
                "model": {"source": "acme/tiny"},
                "inference": inference,
                "storage": {"persistentVolumeClaim": "shared"},
            },
        }
    )
    pod = children.build_engine_pod(job, children.Owner("k", "ns", "u"), OperatorConfig(), 0)
    command: list[str] = pod["spec"]["containers"][0]["command"]
    return command


def test_the_operators_sglang_command_becomes_an_embedded_engine_command() -> None:
    import argparse

    command = _engine_command(extraArgs=["--max-queued-requests", "4"])
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    argv = sglang_as_embedded(command[3:])
    assert argv[:4] == ["-m", "dressage", "engine", "serve"]
    parser = argparse.ArgumentParser()
    engine_cli.add_arguments(parser)
    args = parser.parse_args(argv[3:])
    assert args.model == "/dressage/models/acme--tiny"
    assert args.port == 30000
    assert args.max_queued_requests == 4
    assert args.weight_version == children.INITIAL_WEIGHT_VERSION


def test_a_flag_without_a_mapping_is_refused() -> None:
    with pytest.raises(AssertionError, match="--chunked-prefill-size"):
        sglang_as_embedded(["--model-path", "m", "--chunked-prefill-size", "512"])
    with pytest.raises(AssertionError, match="--tp-size must be 1"):
        sglang_as_embedded(["--model-path", "m", "--tp-size", "2"])


def test_variable_references_expand_as_kubernetes_does() -> None:
    env = {"A": "1", "B": "two"}
    assert _expand("--x=$(A) $(B)/$(C) $$(A)", env) == "--x=1 two/$(C) $(A)"
