"""The operator's own settings, as the README lists them and `OperatorConfig.from_env`
reads them."""

from __future__ import annotations

import dataclasses

import pytest
from dressage_operator.config import OperatorConfig

from .children.support import ENV_NAME, README


def test_readme_lists_the_operator_variables_config_reads() -> None:
    listed = {n for n in ENV_NAME.findall(README.read_text()) if n.startswith("DRESSAGE_OPERATOR_")}
    assert len(listed) == len(dataclasses.fields(OperatorConfig))
    values = {
        "PORT": "1234",
        "SECONDS": "7.5",
        "TEMPLATE": "http://x/{job}",
        "POLICIES": "true",
        "LIMITS": '{"trainerNodes": 3}',
        "CYCLE": "7",
        "CHILDREN": "false",
    }
    for name in listed:
        value = next((v for k, v in values.items() if name.endswith(k)), "registry/image:1")
        assert OperatorConfig.from_env({name: value}) != OperatorConfig(), f"{name} is not read"


@pytest.mark.parametrize(
    ("variable", "image", "problem"),
    [
        ("DRESSAGE_OPERATOR_RUNTIME_IMAGE", "ghcr.io/Dressage/runtime:0.1.0", "must be lower case"),
        ("DRESSAGE_OPERATOR_SGLANG_IMAGE", "sglang@sha256:abc", "must have 64 hex digits"),
    ],
)
def test_a_default_image_the_kubelet_cannot_pull_stops_the_operator_at_startup(
    variable: str, image: str, problem: str
) -> None:
    """Every job's pods would fail with `InvalidImageName`: the operator refuses to start."""
    with pytest.raises(ValueError, match=problem) as info:
        OperatorConfig.from_env({variable: image})
    assert variable in str(info.value)
