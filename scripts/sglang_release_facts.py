"""Find, for each SGLang release fact Dressage relies on, the first release that has it.

    python scripts/sglang_release_facts.py            # print the table
    python scripts/sglang_release_facts.py --write    # and write scripts/sglang_release_facts.json

Walks every final release of `sglang` on PyPI from the oldest to the newest tested release
(`dressage.api.sglang.SGLANG_TESTED_RELEASES`; pre-releases are skipped), fetches each one's
wheel with `pip download --no-deps` into `.sglang/wheels/` (gitignored, reused by later runs)
and reads its source without importing or installing it: `ast` over the request classes
(`srt/managers/io_struct.py`), the sampling parameters (`srt/sampling/sampling_params.py`:
its keys, and which of them it compares with None),
the server arguments (`srt/server_args.py`, and `srt/arg_groups/` where a release keeps its
fields there), the HTTP server (`srt/entrypoints/http_server.py`) and the labels of its own
metrics (`MetricLabel`). What shows each fact is
the fact's `evidence` in `dressage.api.sglang.FEATURES`, so the table says what is checked and
this script only interprets it. `tests/unit/api/test_sglang_facts.py` holds the table to the
committed output.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dressage.api.sglang import (  # noqa: E402
    FEATURES,
    SGLANG_NEWEST_TESTED,
    SGLANG_OLDEST_TESTED,
    Function,
    MetricLabel,
    NullDefault,
    RequestField,
    Route,
    SamplingParam,
    ServerArg,
)

CACHE = ROOT / ".sglang" / "wheels"
OUTPUT = ROOT / "scripts" / "sglang_release_facts.json"
INDEX = "https://pypi.org/pypi/sglang/json"

IO_STRUCT = "sglang/srt/managers/io_struct.py"
SAMPLING_PARAMS = "sglang/srt/sampling/sampling_params.py"
SERVER_ARGS = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
ROUTE_METHODS = frozenset({"get", "post", "put", "delete", "patch", "api_route", "add_api_route"})


def releases(oldest: str, newest: str) -> list[str]:
    """Every final release on the index from `oldest` to `newest`, oldest first."""
    with urllib.request.urlopen(INDEX, timeout=60) as answer:
        listed = json.load(answer)["releases"]
    low, high = Version(oldest), Version(newest)
    found = [
        Version(v)
        for v, files in listed.items()
        if files and not Version(v).is_prerelease and low <= Version(v) <= high
    ]
    return [str(v) for v in sorted(found)]


def wheel(release: str) -> Path:
    """The release's wheel, downloaded once into `CACHE`."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for path in CACHE.glob(f"sglang-{release}-*.whl"):
        return path
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", f"sglang=={release}", "-d", str(CACHE)],
        check=True,
    )  # fmt: skip
    return next(CACHE.glob(f"sglang-{release}-*.whl"))


class Source:
    """One release's Python source, read from its wheel and parsed on demand."""

    def __init__(self, path: Path) -> None:
        self._zip = zipfile.ZipFile(path)
        self._names = [n for n in self._zip.namelist() if n.endswith(".py")]
        self._trees: dict[str, ast.Module] = {}

    def text(self, name: str) -> str:
        return self._zip.read(name).decode("utf-8", errors="replace")

    def tree(self, name: str) -> ast.Module:
        if name not in self._trees:
            self._trees[name] = ast.parse(self.text(name))
        return self._trees[name]

    def files(self, *prefixes: str) -> list[str]:
        return [n for n in self._names if n.startswith(prefixes)]


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def _fields(cls: ast.ClassDef) -> set[str]:
    """The class body's annotated names and its `__init__`'s keywords."""
    names = {
        s.target.id
        for s in cls.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    }
    for s in cls.body:
        if isinstance(s, ast.FunctionDef) and s.name == "__init__":
            names |= {a.arg for a in s.args.args[1:] + s.args.kwonlyargs}
    return names


def _class_fields(tree: ast.Module, name: str) -> set[str]:
    """`name`'s fields with those of its bases defined in the same module."""
    classes = _classes(tree)
    cls = classes.get(name)
    if cls is None:
        return set()
    names = _fields(cls)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and base.id != name:
            names |= _class_fields(tree, base.id)
    return names


def _null_checked(tree: ast.Module) -> set[str]:
    """The names `SamplingParams.__init__` or `__post_init__` compare with None."""
    cls = _classes(tree).get("SamplingParams")
    names: set[str] = set()
    methods = [
        s for s in (cls.body if cls else []) if isinstance(s, ast.FunctionDef)
        and s.name in ("__init__", "__post_init__")
    ]  # fmt: skip
    for method in methods:
        for node in ast.walk(method):
            if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ast.Is | ast.IsNot):
                continue
            right = node.comparators[0]
            if not (isinstance(right, ast.Constant) and right.value is None):
                continue
            if isinstance(node.left, ast.Name):
                names.add(node.left.id)
            elif isinstance(node.left, ast.Attribute):
                names.add(node.left.attr)
    return names


def _routes(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ROUTE_METHODS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def _server_args(source: Source) -> set[str]:
    names: set[str] = set()
    for name in source.files(*SERVER_ARGS):
        for cls in _classes(source.tree(name)).values():
            names |= _fields(cls)
    return names


def _defines(source: Source, function: str) -> bool:
    needle = f"def {function}("
    for name in source.files("sglang/"):
        text = source.text(name)
        if needle in text:
            tree = source.tree(name)
            if any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
                for n in ast.walk(tree)
            ):
                return True
    return False


TOKENIZER_LABEL_FILES = (
    "sglang/srt/managers/tokenizer_manager.py",
    "sglang/srt/observability/metrics_collector.py",
)
"""Where a release builds the tokenizer manager's metric labels (the other dicts keyed
`model_name`, e.g. the encoder server's, label other collectors)."""


def _keys(node: ast.Dict) -> dict[str, ast.expr]:
    return {
        k.value: v
        for k, v in zip(node.keys, node.values, strict=True)
        if isinstance(k, ast.Constant) and isinstance(k.value, str)
    }


def _metric_labels(source: Source, collector: str) -> set[str]:
    """The label names `collector`'s series carry in the release (see `MetricLabel`)."""
    labels: set[str] = set()
    if collector == "per_request":
        for name in source.files("sglang/srt/"):
            if "class TokenizerMetricsCollector" not in source.text(name):
                continue
            cls = _classes(source.tree(name)).get("TokenizerMetricsCollector")
            labels |= {
                n.value
                for n in ast.walk(cls) if cls is not None
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }  # fmt: skip
        return labels
    names = TOKENIZER_LABEL_FILES if collector == "tokenizer" else source.files("sglang/srt/")
    for name in names:
        if name not in source.files("sglang/") or '"model_name"' not in source.text(name):
            continue
        for node in ast.walk(source.tree(name)):
            if not isinstance(node, ast.Dict):
                continue
            keys = _keys(node)
            if collector == "scheduler" and {"model_name", "engine_type", "tp_rank"} <= set(keys):
                labels |= set(keys)
            model = keys.get("model_name")
            if (
                collector == "tokenizer"
                and "tp_rank" not in keys
                and isinstance(model, ast.Attribute)
                and model.attr == "served_model_name"
            ):
                labels |= set(keys)
    return labels


def has(source: Source, evidence: object) -> bool:
    """Whether the release's source shows `evidence`."""
    if isinstance(evidence, RequestField):
        return evidence.field in _class_fields(source.tree(IO_STRUCT), evidence.request)
    if isinstance(evidence, SamplingParam):
        return evidence.key in _class_fields(source.tree(SAMPLING_PARAMS), "SamplingParams")
    if isinstance(evidence, NullDefault):
        return evidence.key in _null_checked(source.tree(SAMPLING_PARAMS))
    if isinstance(evidence, Route):
        return evidence.path in set(_routes(source.tree(HTTP_SERVER)))
    if isinstance(evidence, ServerArg):
        return evidence.name in _server_args(source)
    if isinstance(evidence, Function):
        return _defines(source, evidence.name)
    if isinstance(evidence, MetricLabel):
        return evidence.label in _metric_labels(source, evidence.collector)
    raise TypeError(f"unknown evidence {evidence!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUTPUT.relative_to(ROOT)}")
    args = parser.parse_args()
    started = time.monotonic()
    walked = releases(SGLANG_OLDEST_TESTED, SGLANG_NEWEST_TESTED)
    first: dict[str, str | None] = {name: None for name in FEATURES}
    for release in walked:
        source = Source(wheel(release))
        for name, feature in FEATURES.items():
            present = all(has(source, e) for e in feature.evidence)
            if present and first[name] is None:
                first[name] = release
            elif not present and first[name] is not None:
                print(f"note: {name} is in {first[name]} but not in {release}", file=sys.stderr)
        print(f"read {release}", file=sys.stderr)
    width = max(map(len, first))
    for name, since in first.items():
        print(f"{name:<{width}}  {since or 'absent'}")
    elapsed = time.monotonic() - started
    span = f"{walked[0]} to {walked[-1]}"
    print(f"{len(walked)} releases ({span}) in {elapsed:.0f} s", file=sys.stderr)
    if args.write:
        table = {"releases": walked, "first_release": first}
        OUTPUT.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
