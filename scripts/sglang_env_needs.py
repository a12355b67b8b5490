"""What a release's contract-tier environment still needs: one requirement a line, for
`pip install --no-deps --target DIR` (nothing printed: the environment is complete).

    python scripts/sglang_env_needs.py DIR

DIR (`.sglang/VERSION`, made by `scripts/sglang-env.sh`) is used on top of the main venv with
`PYTHONPATH=DIR`, so a package in DIR hides the venv's. Two kinds of need, the first found:

1. A conflict: a distribution in DIR (the release, and what was added to it before) requires a
   package that the environment (DIR over the venv) holds at a version the requirement rejects.
   The answer is every requirement DIR's distributions put on that package (the release's own
   pin first: `transformers==5.12.1` where the venv has 5.25.0, then that transformers'
   `tokenizers` and `huggingface-hub` ranges, and the release's `kernels<0.15`, which that
   transformers imports and which the venv's newer one breaks). torch and the packages built
   with it are never replaced: the tier runs on the venv's CPU torch.
2. A missing import: the tier's modules (`tests/contract/conftest.py` `SGLANG_MODULES`) are
   imported in a fresh interpreter with the tier's torchvision stand-in; a
   `ModuleNotFoundError` for a package the release requires gives that requirement (0.5.19's
   `xgrammar==0.2.1`). Any other import error is printed to stderr and ends the search (the
   tier then shows it); so is a missing module no requirement of the release provides (add it
   with `scripts/sglang-compat.sh VERSION --with PKG==V`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
KEPT = frozenset({"torch", "triton", "torchvision", "torchaudio"})
"""Never replaced: the venv's CPU torch and what must match it."""
PROBE = """
import importlib, sys
from tests.contract.conftest import SGLANG_MODULES, install_torchvision_stand_in
install_torchvision_stand_in()
for module in SGLANG_MODULES:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        print(exc.name)
        sys.exit(3)
"""


def applies(requirement: Requirement) -> bool:
    """Whether `requirement` holds on this machine for a plain install (no extras)."""
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def requirements_in(directory: Path) -> dict[str, list[Requirement]]:
    """The requirements of the distributions in `directory`, by package; the release's
    (`sglang`) first."""
    found: dict[str, list[Requirement]] = {}
    dists = sorted(
        metadata.distributions(path=[str(directory)]),
        key=lambda d: canonicalize_name(d.metadata["Name"]) != "sglang",
    )
    for dist in dists:
        for text in dist.requires or ():
            requirement = Requirement(text)
            if applies(requirement):
                found.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return found


def visible_versions(directory: Path) -> dict[str, str]:
    """The version of each package the environment imports: DIR's, else the venv's."""
    versions: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(directory), *sys.path]):
        versions.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    return versions


def conflicts(directory: Path) -> list[str]:
    """Kind 1: the first conflicting package's combined requirement (empty: none)."""
    versions = visible_versions(directory)
    for name, requirements in requirements_in(directory).items():
        if name in KEPT or name not in versions:
            continue
        specifier = SpecifierSet()
        for requirement in requirements:
            specifier &= requirement.specifier
        if not specifier.contains(versions[name], prereleases=True):
            return [f"{name}{specifier}"]
    return []


def missing(directory: Path) -> list[str]:
    """Kind 2: the requirement providing the first module the tier's imports miss."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(ROOT), str(ROOT / "testkit")])
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if probe.returncode == 0:
        return []
    if probe.returncode != 3:
        failure = probe.stderr[-3000:]
        print(f"sglang_env_needs: the tier's imports fail:\n{failure}", file=sys.stderr)
        return []
    module = probe.stdout.strip().split(".")[0]
    for name, requirements in requirements_in(directory).items():
        if name == canonicalize_name(module) and name not in KEPT:
            return [f"{name}{requirements[0].specifier}"]
    print(
        f"sglang_env_needs: the tier imports {module!r}, which no requirement of the release "
        "provides: add it with --with PKG==V",
        file=sys.stderr,
    )
    return []


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: python scripts/sglang_env_needs.py DIR (an .sglang/VERSION directory)")
    directory = Path(sys.argv[1]).resolve()
    for need in conflicts(directory) or missing(directory):
        print(need)


if __name__ == "__main__":
    main()
