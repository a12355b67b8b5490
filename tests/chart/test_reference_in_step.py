"""The generated reference pages are in step with the code they are generated from.

`docs/reference/job.md` comes from the job model (the structural schema the CRD is generated
from) and `docs/reference/cli.md` from the commands' argument parsers, both written by
`python -m scripts.gen_reference`; a field, a default, a bound, a flag or a help text changed
without regenerating fails here, and the failure names the command.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

import pytest

from dressage import cli
from dressage.api.crd import spec_schema
from scripts import gen_reference

HINT = f"run `{gen_reference.REGENERATE}` and commit the result"


@pytest.mark.parametrize("page", sorted(gen_reference.PAGES), ids=lambda p: p.name)
def test_the_page_is_what_the_code_generates(page: Path) -> None:
    name = page.relative_to(gen_reference.REPO)
    assert page.exists(), f"{name} is missing: {HINT}"
    on_disk = page.read_text(encoding="utf-8")
    assert on_disk == gen_reference.PAGES[page](), f"{name} is out of date: {HINT}"


def _paths(path: str, node: dict[str, Any]) -> list[str]:
    """Every field path under an object schema, list items and map values followed."""
    found = []
    for name, prop in node.get("properties", {}).items():
        child = f"{path}.{name}"
        found.append(child)
        for inner, suffix in ((prop, ""), (prop.get("items"), "[]")):
            if isinstance(inner, dict):
                found += _paths(child + suffix, inner)
        values = prop.get("additionalProperties")
        if isinstance(values, dict):
            found += _paths(child + "{}", values)
    return found


def test_every_spec_field_has_a_row_in_its_section() -> None:
    text = gen_reference.job_reference()
    sections = {block.split("`", 2)[1]: block for block in text.split("\n### ")[1:] if "`" in block}
    missing = []
    for path in _paths("spec", spec_schema()):
        parent, name = path.rsplit(".", 1)
        if f"| `{name}`" not in sections.get(parent, ""):
            missing.append(path)
    assert not missing, f"fields without a row: {missing}"


def test_every_flag_of_every_command_is_listed() -> None:
    text = gen_reference.cli_reference()
    for name, (module_name, _) in cli.SUBCOMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"dressage {name}")
        importlib.import_module(module_name).add_arguments(parser)
        section = text.split(f"## `dressage {name}`", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in section, f"dressage {name} {flag} is not listed"


def test_the_shell_does_not_change_the_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's flag defaults come from DRESSAGE_OPERATOR_* and argparse wraps usage at
    COLUMNS: neither may leak into the generated text."""
    before = gen_reference.cli_reference()
    monkeypatch.setenv("DRESSAGE_OPERATOR_RUNTIME_IMAGE", "registry.example/runtime:dev")
    monkeypatch.setenv("DRESSAGE_OPERATOR_RESYNC_SECONDS", "7")
    monkeypatch.setenv("COLUMNS", "40")
    assert gen_reference.cli_reference() == before
