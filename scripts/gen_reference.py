"""Generate the docs site's reference pages: every AsyncRLJob field and every command-line flag.

`docs/reference/job.md` is written from the structural schema the CRD is generated from
(`dressage.api.crd.spec_schema` and `status_schema`, themselves from the pydantic job model), so
a field's type, default, bounds and description are the ones the API server and the operator
enforce, and the cross-field rules are the CRD's CEL rules. `docs/reference/cli.md` is written
from the argument parsers themselves: each `dressage` subcommand's `add_arguments` and the
operator's `build_parser`. Neither page is edited by hand; a test regenerates both and fails on
a difference:

    python -m scripts.gen_reference          # rewrite both pages
    python -m scripts.gen_reference --check  # exit 1 if a page is out of date
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
JOB_PAGE = REPO / "docs" / "reference" / "job.md"
CLI_PAGE = REPO / "docs" / "reference" / "cli.md"
REGENERATE = "python -m scripts.gen_reference"
"""The command that rewrites both pages (run from the repository root)."""

Schema = dict[str, Any]
_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?$])")


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell: one line, no bare pipe, and outside code spans
    no `<` that Markdown would take for the start of an HTML tag (`<storage.mountPath>/<job>`
    would vanish from the page)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = _TAG_LIKE.sub("&lt;", parts[i])
    return "`".join(parts)


def heading(level: int, title: str, anchor_id: str) -> list[str]:
    """A heading with a fixed anchor both renderers honour: an empty `<a id>` on the line
    before it. GitHub shows attribute lists (`{ #id }`) as text; mkdocs reads the id from the
    raw HTML, so links to `#id` resolve on the site and on GitHub alike."""
    return [f'<a id="{anchor_id}"></a>', "", f"{'#' * level} {title}"]


def anchor(path: str) -> str:
    """The HTML id of a field path's section (`spec.trainer.template.env[]` ->
    `spec-trainer-template-env`)."""
    return "".join(c if c.isalnum() else "-" for c in path.replace("[]", "").replace("{}", ""))


def _children(path: str, node: Schema) -> Iterator[tuple[str, Schema]]:
    """The object sections under one field: itself, its list items, its map values."""
    if "properties" in node:
        yield path, node
    items = node.get("items")
    if isinstance(items, dict):
        yield from _children(f"{path}[]", items)
    values = node.get("additionalProperties")
    if isinstance(values, dict):
        yield from _children(f"{path}{{}}", values)


def _type(node: Schema, link: str | None) -> str:
    if node.get("x-kubernetes-int-or-string"):
        text = "integer or string"
    elif node.get("type") == "array":
        text = f"list of {_type(node.get('items', {}), link)}"
        link = None
    elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        text = f"map of string to {_type(node['additionalProperties'], link)}"
        link = None
    elif node.get("type") == "object" and "properties" not in node:
        text = "object (free-form)"
    elif "type" not in node:
        text = "any scalar" if node.get("x-kubernetes-preserve-unknown-fields") else "any"
    else:
        text = str(node["type"])
    if link is not None:
        text = f"[{text}](#{link})"
    if node.get("nullable"):
        text += ", optional"
    return text


def _bounds(node: Schema) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"]))
    for key, sign in (("minimum", ">="), ("maximum", "<=")):
        if key in node:
            strict = node.get("exclusiveM" + key[1:])
            parts.append(f"{sign.rstrip('=') if strict else sign} {node[key]}")
    for key, what in (("minLength", "length >="), ("maxLength", "length <=")):
        if key in node:
            parts.append(f"{what} {node[key]}")
    for key, what in (("minItems", "items >="), ("maxItems", "items <=")):
        if key in node:
            parts.append(f"{what} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    items = node.get("items")
    if isinstance(items, dict) and "properties" not in items:
        inner = _bounds(items)
        if inner:
            parts.append(f"each: {inner}")
    return "; ".join(parts)


def _default(node: Schema) -> str:
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'], sort_keys=True)}`"


def _section(path: str, node: Schema) -> list[str]:
    required = set(node.get("required", []))
    lines = [*heading(3, f"`{path}`", anchor(path)), ""]
    if node.get("description"):
        lines += [_cell(node["description"]), ""]
    lines += ["| Field | Type | Default | Bounds | Description |", "|---|---|---|---|---|"]
    for name, prop in node["properties"].items():
        child = f"{path}.{name}"
        nested = next(iter(_children(child, prop)), None)
        link = anchor(nested[0]) if nested else None
        field = f"`{name}`" + (" (required)" if name in required else "")
        description = _cell(
            prop.get("description", "") or prop.get("items", {}).get("description", "")
        )
        lines.append(
            f"| {field} | {_type(prop, link)} | {_default(prop)} | {_cell(_bounds(prop))} "
            f"| {description} |"
        )
    for rule in node.get("x-kubernetes-validations", []):
        if rule is node["x-kubernetes-validations"][0]:
            lines += ["", "Rules the API server and the operator enforce here:", ""]
        lines.append(f"- {_cell(rule['message'])}")
    return [*lines, ""]


def _sections(path: str, node: Schema) -> Iterator[list[str]]:
    """Depth-first: an object's table, then each nested object's, in field order."""
    for section_path, section in _children(path, node):
        yield _section(section_path, section)
        for name, prop in section["properties"].items():
            yield from _sections(f"{section_path}.{name}", prop)


def job_reference() -> str:
    """The Markdown text of `docs/reference/job.md`."""
    from dressage.api.crd import ROOT_RULES, spec_schema, status_schema
    from dressage.api.job import API_GROUP, API_VERSION, KIND

    lines = [
        "<!-- Generated from the job model (dressage/api) by "
        f"`{REGENERATE}`. Do not edit: change the model and regenerate. -->",
        "",
        "# AsyncRLJob reference",
        "",
        f"`apiVersion: {API_GROUP}/{API_VERSION}`, `kind: {KIND}` (short name `arj`). Every "
        "field of the job, from the pydantic model that the operator validates with, "
        "`dressage run` executes and the CRD is generated from. Field names are the "
        "manifest's (camelCase). A default applies when the field is left out; *optional* "
        "means the field may be left unset (null) and the description says what unset means.",
        "",
        "Rules on the job as a whole:",
        "",
        *(f"- {_cell(rule['message'])}" for rule in ROOT_RULES),
        "",
        "## Spec",
        "",
    ]
    for section in _sections("spec", spec_schema()):
        lines += section
    lines += [
        "## Status",
        "",
        "Written by the operator only (`kubectl get arj NAME -o yaml`); a manifest never sets it.",
        "",
    ]
    for section in _sections("status", status_schema()):
        lines += section
    return "\n".join(lines).rstrip() + "\n"


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    return f"{names} `{' '.join(metavar) if isinstance(metavar, tuple) else metavar}`"


def _parser_section(title: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{title}`", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        default = action.default
        if action.nargs == 0 or default in (None, "", argparse.SUPPRESS, []) or action.required:
            shown = ""
        else:
            shown = f"`{default}`"
        if action.choices:
            choices = ", ".join(f"`{c}`" for c in action.choices)
            help_text = f"{action.help or ''} (one of {choices})"
        else:
            help_text = action.help or ""
        if action.required:
            help_text = f"Required. {help_text}"
        help_text = help_text.replace("%(default)s", str(default)).replace("%%", "%")
        rows.append(f"| {_flags(action)} | {_cell(shown)} | {_cell(help_text)} |")
    if rows:
        lines += ["| Argument | Default | Description |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += [_cell(parser.epilog), ""]
    return lines


def cli_reference() -> str:
    """The Markdown text of `docs/reference/cli.md`."""
    # The operator's flag defaults come from its DRESSAGE_OPERATOR_* variables: show the
    # built-in ones, whatever this shell sets.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DRESSAGE_OPERATOR_")}
    # argparse wraps the usage line at the terminal's width (COLUMNS): fix it.
    clean["COLUMNS"] = "100"
    with mock.patch.dict(os.environ, clean, clear=True):
        return _cli_reference()


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The parser `dressage NAME` runs with (its flags added as `dressage.cli` adds them)."""
    from dressage import cli

    top = cli.build_parser([name])
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = commands.choices[name]
    return parser


def _cli_reference() -> str:
    from dressage_operator.main import build_parser

    from dressage import cli

    top = cli.build_parser([])
    lines = [
        "<!-- Generated from the argument parsers (dressage/cli.py and each subcommand's "
        f"add_arguments, dressage_operator.main) by `{REGENERATE}`. Do not edit. -->",
        "",
        "# Command-line reference",
        "",
        "Every command and flag, from the parsers the commands run with. `dressage COMMAND "
        "--help` prints the same.",
        "",
        *_parser_section("dressage", top),
        "| Command | What it does |",
        "|---|---|",
        *(
            f"| [`{name}`](#dressage-{name}) | {_cell(help_text)} |"
            for name, (_, help_text) in cli.SUBCOMMANDS.items()
        ),
        "",
    ]
    for name, (_, help_text) in cli.SUBCOMMANDS.items():
        section = _parser_section(f"dressage {name}", subcommand_parser(name))
        section[0:1] = [*heading(2, f"`dressage {name}`", f"dressage-{name}"), "", _cell(help_text)]
        lines += section
    section = _parser_section("dressage-operator", build_parser())
    section[0:1] = heading(2, "`dressage-operator`", "dressage-operator")
    lines += section
    return "\n".join(lines).rstrip() + "\n"


PAGES = {JOB_PAGE: job_reference, CLI_PAGE: cli_reference}


def stale_pages() -> list[Path]:
    """The reference pages whose text differs from what the code generates now."""
    return [
        page
        for page, render in PAGES.items()
        if not page.exists() or page.read_text(encoding="utf-8") != render()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for page in stale:
            print(f"{page.relative_to(REPO)} is out of date: run `{REGENERATE}`")
        return 1 if stale else 0
    for page, render in PAGES.items():
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render(), encoding="utf-8")
        print(f"wrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
