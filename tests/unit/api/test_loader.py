"""An unknown field anywhere in a manifest is named with the known field it most resembles,
at every depth of the job model: in a list item, a mapping value, an optional section."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from dressage.api.job import AsyncRLJob
from dressage.api.loader import (
    ConfigurationError,
    JobValidationError,
    known_fields,
    load_job,
    unknown_field_message,
    validate_job,
)

ROOT = Path(__file__).resolve().parents[3]


def _places(
    model: type[BaseModel], path: tuple[int | str, ...] = (), seen: frozenset[type] = frozenset()
) -> Iterator[tuple[tuple[int | str, ...], type[BaseModel]]]:
    """Every model of the job with the pydantic location of one instance of it."""
    yield path, model
    for name, info in model.model_fields.items():
        for kind, steps in _inner(info.annotation, ()):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in seen:
                yield from _places(kind, (*path, info.alias or name, *steps), seen | {model})


def _inner(kind: Any, steps: tuple[int | str, ...]) -> Iterator[tuple[Any, tuple[int | str, ...]]]:
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        yield from _inner(typing.get_args(kind)[0], steps)
    elif origin in (typing.Union, types.UnionType):
        for member in typing.get_args(kind):
            yield from _inner(member, steps)
    elif origin in (list, Sequence):
        yield from _inner(typing.get_args(kind)[0], (*steps, 0))
    elif origin in (dict, Mapping):
        yield from _inner(typing.get_args(kind)[1], (*steps, "some-key"))
    else:
        yield kind, steps


PLACES = list(_places(AsyncRLJob))
FIELDS = [
    (path, info.alias or name)
    for path, model in PLACES
    for name, info in model.model_fields.items()
    if len(info.alias or name) > 3
]


def test_the_walk_reaches_the_deep_models() -> None:
    paths = {".".join(map(str, path)) for path, _ in PLACES}
    assert {"spec.task.dataset", "spec.trainer.template.env.0", "metadata"} <= paths
    assert len(PLACES) > 20


@given(
    field=st.sampled_from(FIELDS),
    typo=st.sampled_from(["drop", "swap", "lower", "plural"]),
    at=st.integers(1, 40),
)
def test_every_field_at_every_depth_is_suggested_for_its_typos(
    field: tuple[tuple[int | str, ...], str], typo: str, at: int
) -> None:
    path, name = field
    k = 1 + at % (len(name) - 2)
    wrong = {
        "drop": name[:k] + name[k + 1 :],
        "swap": name[: k - 1] + name[k] + name[k - 1] + name[k + 1 :],
        "lower": name.lower(),
        "plural": name + "s",
    }[typo]
    if wrong in known_fields(path):
        return  # the typo is itself a field
    assert unknown_field_message((*path, wrong)) == f"unknown field; did you mean {name}?"


def _manifest(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "dressage.io/v1alpha1", "kind": "AsyncRLJob",
            "metadata": {"name": "j"}, "spec": spec}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        (
            {"task": {"name": "dataset", "dataset": {"path": "d.jsonl", "promtColumn": "q"}}},
            "spec.task.dataset.promtColumn",
            "unknown field; did you mean promptColumn?",
        ),
        ({"rollout": {"batchsize": 4}}, "spec.rollout.batchsize", "did you mean batchSize?"),
        (
            {"trainer": {"template": {"env": [{"name": "A", "valeu": "1"}]}}},
            "spec.trainer.template.env[0].valeu",
            "did you mean value?",
        ),
        ({"stalenes": {}}, "spec.stalenes", "did you mean staleness?"),
        ({"xyzzy": 1}, "spec.xyzzy", "unknown field; known here: activeDeadlineSeconds, code, "),
    ],
)
def test_a_manifest_typo_names_the_field_and_the_likely_one(
    spec: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(JobValidationError) as refused:
        validate_job(_manifest(model={"source": "builtin:tiny"}, **spec))
    ((path, message),) = [e for e in refused.value.errors if "unknown field" in e[1]]
    assert path == field
    assert says in message


def test_a_typo_in_a_yaml_file_is_a_configuration_error(tmp_path: Path) -> None:
    manifest = yaml.safe_load((ROOT / "examples" / "local-math.yaml").read_text())
    manifest["spec"]["task"]["dataset"]["promtColumn"] = "question"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    with pytest.raises(ConfigurationError, match=r"promtColumn: unknown field; did you mean "):
        load_job(path)


def test_an_unknown_place_gets_no_guess() -> None:
    assert known_fields(("spec", "nowhere")) == []
    assert unknown_field_message(("spec", "nowhere", "x")) == "unknown field"
