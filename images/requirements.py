"""Print the requirements an image installs before the project itself, from pyproject.toml.

    python requirements.py PYPROJECT [--extra NAME ...] [--leave-out NAME ...]

The project's core dependencies plus those of each `--extra`, one per line (markers kept),
less the distributions named by `--leave-out` (an image that never imports them). The images
install these in a layer of their own, before the project's wheel, so a change to the sources
reuses it; only a change to the printed list reinstalls the dependencies. Standard library
only: it runs in any image's Python before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib


def canonical(name: str) -> str:
    """A distribution's name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def requirements(project: dict[str, object], extras: list[str], leave_out: list[str]) -> list[str]:
    """The core dependencies and those of `extras`, in order, without `leave_out` or repeats."""
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"no such extra in pyproject.toml: {', '.join(unknown)}")
    listed = list(project.get("dependencies", []))  # type: ignore[call-overload]
    for extra in extras:
        listed += optional[extra]
    names = {requirement_name(r) for r in listed}
    missing = [n for n in leave_out if canonical(n) not in names]
    if missing:
        # A name that no longer appears is a stale exclusion: say so instead of ignoring it.
        raise SystemExit(f"--leave-out names no listed dependency: {', '.join(missing)}")
    dropped = {canonical(n) for n in leave_out}
    chosen: list[str] = []
    for requirement in listed:
        if requirement_name(requirement) not in dropped and requirement not in chosen:
            chosen.append(requirement)
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pyproject")
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--leave-out", nargs="*", default=[])
    args = parser.parse_args(argv)
    with open(args.pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    sys.stdout.write("".join(f"{r}\n" for r in requirements(project, args.extra, args.leave_out)))


if __name__ == "__main__":
    main()
