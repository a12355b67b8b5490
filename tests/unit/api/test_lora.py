"""`spec.model.lora`: a LoRA adapter's rank, alpha, dropout and target modules, validated when
the manifest is read; every refusal names the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api import JobValidationError, validate_job
from dressage.api.lora import DEFAULT_TARGET_MODULES, LoraSpec


def _job(lora: dict[str, Any] | None) -> dict[str, Any]:
    model: dict[str, Any] = {"source": "builtin:tiny"}
    if lora is not None:
        model["lora"] = lora
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "lora"},
        "spec": {"model": model},
    }


def test_a_job_without_lora_trains_full_weights() -> None:
    assert validate_job(_job(None)).spec.model.lora is None


def test_an_empty_lora_block_takes_rank_16_on_the_attention_projections() -> None:
    lora = validate_job(_job({})).spec.model.lora
    assert lora == LoraSpec()
    assert (lora.rank, lora.alpha, lora.dropout) == (16, 32.0, 0.0)
    assert tuple(lora.target_modules) == DEFAULT_TARGET_MODULES
    assert lora.scaling == 2.0


def test_the_fields_round_trip_in_camel_case() -> None:
    lora = {"rank": 8, "alpha": 16.0, "dropout": 0.05, "targetModules": ["q_proj", "v_proj"],
            "initialAdapter": "/data/adapter"}  # fmt: skip
    wire = validate_job(_job(lora)).to_wire()
    assert wire["spec"]["model"]["lora"] == lora


@pytest.mark.parametrize(
    ("lora", "field"),
    [
        ({"rank": 0}, "rank"),
        ({"rank": 4096}, "rank"),
        ({"alpha": 0}, "alpha"),
        ({"dropout": 1.0}, "dropout"),
        ({"targetModules": []}, "targetModules"),
        ({"targetModules": ["q_proj", "q_proj"]}, "targetModules"),
        ({"targetModules": ["self_attn.q proj"]}, "targetModules"),
        ({"rnak": 4}, "rnak"),
    ],
)
def test_a_bad_field_is_refused_by_name(lora: dict[str, Any], field: str) -> None:
    with pytest.raises(JobValidationError, match=field):
        validate_job(_job(lora))


@given(st.integers(min_value=1, max_value=1024), st.floats(min_value=0.01, max_value=1e3))
def test_scaling_is_alpha_over_rank(rank: int, alpha: float) -> None:
    assert LoraSpec(rank=rank, alpha=alpha).scaling == pytest.approx(alpha / rank)


def test_a_module_sglang_serves_no_adapter_on_is_refused_with_the_closest_name() -> None:
    with pytest.raises(JobValidationError, match=r"targetModules.*'q_prj': did you mean 'q_proj'"):
        validate_job(_job({"targetModules": ["q_prj"]}))
    with pytest.raises(JobValidationError, match="SGLang serves no adapter on 'lm_head'"):
        validate_job(_job({"targetModules": ["lm_head"]}))
