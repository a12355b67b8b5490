"""`global.imageRegistry`: one value moves every image the chart names to another registry.

Rendered by the real helm binary: the operator's image, the `helm test` pod's, and the job
images the chart passes to the operator (`DRESSAGE_OPERATOR_RUNTIME_IMAGE`,
`DRESSAGE_OPERATOR_SGLANG_IMAGE`), which the operator reads as its own settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_operator.config import OperatorConfig

from dressage.api.images import image_reference_problem
from tests.chart.tools import CHART, helm_template, one, render, require_tool, run_tool

REGISTRY = "my.registry/team"
JOB_IMAGE_ENV = ("DRESSAGE_OPERATOR_RUNTIME_IMAGE", "DRESSAGE_OPERATOR_SGLANG_IMAGE")


def _containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = obj.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or spec
    for key in ("initContainers", "containers"):
        yield from pod.get(key) or ()


def _images(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Every image the rendered chart names, by where: `<Kind>/<name>/<container>` for a
    container's image, the variable's name for a job image passed to the operator."""
    found: dict[str, str] = {}
    for obj in objects:
        for container in _containers(obj):
            where = f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}"
            found[where] = container["image"]
            for env in container.get("env") or ():
                if env["name"] in JOB_IMAGE_ENV:
                    found[env["name"]] = env["value"]
    return found


def _operator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_default_images_are_the_values_repositories_at_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["global"]["imageRegistry"] == ""
    images = _images(render())
    app = chart["appVersion"]
    sglang = values["jobImages"]["sglang"]
    assert set(images.values()) == {
        f"{values['image']['repository']}:{app}",
        f"{values['jobImages']['runtime']['repository']}:{app}",
        f"{sglang['repository']}:{sglang['tag']}",
    }
    assert images["DRESSAGE_OPERATOR_RUNTIME_IMAGE"] == f"ghcr.io/dressage/dressage-runtime:{app}"


def test_an_empty_registry_renders_exactly_the_default(tmp_path: Path) -> None:
    default = helm_template()
    empty = helm_template({"global": {"imageRegistry": ""}}, tmp_path)
    assert default.returncode == empty.returncode == 0, default.stderr + empty.stderr
    assert empty.stdout == default.stdout


@pytest.mark.parametrize("registry", [REGISTRY, f"{REGISTRY}/", "localhost:5000"])
def test_one_value_moves_every_image_to_the_registry(registry: str, tmp_path: Path) -> None:
    """Each image keeps its name and tag and takes the registry: the operator's, the `helm
    test` pod's and both job images the operator passes to its pods; the operator accepts
    them as its settings."""
    default = _images(render())
    objects = render({"global": {"imageRegistry": registry}}, tmp_path)
    moved = _images(objects)
    assert moved.keys() == default.keys()
    assert len(moved) >= 4, moved  # operator, helm test pod, two job images
    prefix = registry.rstrip("/")
    for where, image in moved.items():
        name_and_tag = default[where].rsplit("/", 1)[1]
        assert image == f"{prefix}/{name_and_tag}", where
        assert image_reference_problem(image) is None, (where, image)
    config = OperatorConfig.from_env(_operator_env(objects))
    assert config.runtime_image == moved["DRESSAGE_OPERATOR_RUNTIME_IMAGE"]
    assert config.sglang_image == moved["DRESSAGE_OPERATOR_SGLANG_IMAGE"]


def test_the_registry_applies_to_repositories_set_in_the_values(tmp_path: Path) -> None:
    values = {
        "global": {"imageRegistry": REGISTRY},
        "image": {"repository": "registry.example.com/ops/my-operator", "tag": "1.2.3"},
    }
    images = _images(render(values, tmp_path))
    operator = [v for k, v in images.items() if k.startswith("Deployment/")]
    assert operator == [f"{REGISTRY}/my-operator:1.2.3"]


def test_the_chart_lints_with_a_registry(tmp_path: Path) -> None:
    helm = require_tool("helm")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"global": {"imageRegistry": REGISTRY}}))
    result = run_tool([helm, "lint", "--strict", str(CHART), "-f", str(values)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "registry", ["my registry/team", "my.registry/Team", "my.registry/team:1.0", "https://x.io"]
)
def test_the_schema_refuses_a_registry_that_is_no_image_prefix(
    registry: str, tmp_path: Path
) -> None:
    result = helm_template({"global": {"imageRegistry": registry}}, tmp_path)
    assert result.returncode != 0
    assert "/global/imageRegistry" in result.stderr, result.stderr
