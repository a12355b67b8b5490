"""`spec.rollout.routingReplay`: admitted only with an SGLang release that returns routed
experts, and what it turns on for the engines (`--enable-return-routed-experts`) and the proxy;
a job without it renders exactly as before."""

from __future__ import annotations

from typing import Any

import pytest
from dressage_operator import children

from dressage.api import validate_job
from dressage.api.job import AsyncRLJob


def _job(rollout: dict[str, Any], version: str = "0.5.23") -> AsyncRLJob:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "moe"},
            "spec": {
                "model": {"source": "/models/Qwen3-30B-A3B"},
                "inference": {"sglangVersion": version},
                "rollout": rollout,
            },
        }
    )


def test_routing_replay_needs_a_release_with_return_routed_experts() -> None:
    with pytest.raises(ValueError, match=r"routingReplay: replay needs SGLang 0\.5\.7 or later"):
        _job({"routingReplay": "replay"}, version="0.5.6")
    assert (
        _job({"routingReplay": "record"}, version="0.5.7").spec.rollout.routing_replay == "record"
    )
    with pytest.raises(ValueError, match="routingReplay"):
        _job({"routingReplay": "sometimes"})


@pytest.mark.parametrize("mode", ["record", "replay"])
def test_the_engines_are_started_to_return_routed_experts(mode: str) -> None:
    on = _job({"routingReplay": mode})
    off = _job({})
    assert "--enable-return-routed-experts" in children.engine_command(on)
    assert "--enable-return-routed-experts" not in children.engine_command(off)
    assert children.engine_inputs(on) != children.engine_inputs(off)
    assert children.proxy_inputs(on)["record_routed_experts"] is True


def test_a_job_without_it_renders_as_before() -> None:
    off = _job({})
    assert "returnRoutedExperts" not in children.engine_inputs(off)
    assert "record_routed_experts" not in children.proxy_inputs(off)


def test_the_flag_is_the_operators() -> None:
    with pytest.raises(ValueError, match=r"set spec\.rollout\.routingReplay"):
        validate_job(
            {
                "apiVersion": "dressage.io/v1alpha1",
                "kind": "AsyncRLJob",
                "metadata": {"name": "moe"},
                "spec": {
                    "model": {"source": "/m"},
                    "inference": {"extraArgs": ["--enable-return-routed-experts"]},
                },
            }
        )
