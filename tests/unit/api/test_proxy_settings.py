"""The proxy's job-derived settings: one function, whose keys are the proxy's own config fields
and which `dressage proxy --config job.yaml` takes its defaults from."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from dressage.api import AsyncRLJob, load_job, validate_job
from dressage.api.proxy_settings import proxy_settings
from dressage.proxy import cli as proxy_cli
from dressage.proxy.config import ProxyConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    proxy_cli.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_setting_is_a_proxy_config_field_taken_as_is(example: Path) -> None:
    settings = proxy_settings(load_job(example))
    assert set(settings) <= set(ProxyConfig.model_fields)
    config = ProxyConfig(engine_urls=["http://engine:30000"], **settings)
    assert {key: getattr(config, key) for key in settings} == settings


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_proxy_started_with_a_job_manifest_runs_these_settings(
    example: Path, tmp_path: Path
) -> None:
    job = load_job(example)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job.to_wire()), encoding="utf-8")
    args = _parse(["--config", str(manifest), "--engine-urls", "http://engine:30000"])
    config = proxy_cli.build_config(args, environ={})
    settings = proxy_settings(job)
    assert {key: getattr(config, key) for key in settings} == settings


def _job(**spec: object) -> AsyncRLJob:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job-a"},
            "spec": {"model": {"source": "builtin:tiny"}, **spec},
        }
    )


def test_partial_rollout_comes_from_the_rollout_mode_or_the_proxy_flag() -> None:
    assert proxy_settings(_job())["partial_rollout"] is False
    assert proxy_settings(_job(rollout={"mode": "partial_async"}))["partial_rollout"] is True
    assert proxy_settings(_job(proxy={"partialRollout": True}))["partial_rollout"] is True


def test_the_chat_model_is_the_tokenizer_when_one_is_set() -> None:
    assert proxy_settings(_job())["model"] == "builtin:tiny"
    job = _job(model={"source": "/models/a", "tokenizer": "/models/tok"})
    assert proxy_settings(job)["model"] == "/models/tok"


def test_a_parser_left_to_the_chat_template_is_not_a_setting() -> None:
    """The proxy's default is `auto`: a job that names no parser hashes as it did before the
    parser fields existed, so upgrading the operator restarts no proxy for them."""
    assert {"reasoning_parser", "tool_call_parser"}.isdisjoint(proxy_settings(_job()))
    named = proxy_settings(_job(rollout={"reasoningParser": "qwen3"}))
    assert named["reasoning_parser"] == "qwen3"
    assert "tool_call_parser" not in named


def test_the_session_cap_is_a_setting_only_when_the_job_moves_it_from_the_default() -> None:
    """`proxy.maxSessions` reaches the proxy (`max_sessions`); left at its default it is not
    in the settings, so a job's proxy restart hash stays what it was before the field."""
    assert "max_sessions" not in proxy_settings(_job())
    settings = proxy_settings(_job(proxy={"maxSessions": 1000}))
    assert settings["max_sessions"] == 1000
    config = ProxyConfig(engine_urls=["http://engine:30000"], **settings)
    assert config.max_sessions == 1000
