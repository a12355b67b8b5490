"""Summarize one contract-tier run (`scripts/sglang-compat.sh`) from its JUnit XML report.

`python scripts/sglang_compat_summary.py REPORT.xml VERSION STATUS` prints the counts and, per
failing test, its id and the first line of what failed, grouped by test file, so a new
release's breaks read as a list of fixes to make.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:200]
    return ""


def summarize(report: Path, version: str, status: int) -> str:
    """The summary of the tier's run against SGLang `version` (`status`: pytest's exit code)."""
    if not report.is_file() or report.stat().st_size == 0:
        return (
            f"SGLang {version}: the tier did not run (pytest exit {status}); "
            "the output above says why"
        )
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    broken: dict[str, list[str]] = defaultdict(list)
    for case in ET.parse(report).getroot().iter("testcase"):
        counts["tests"] += 1
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is None:
                continue
            counts["skipped" if kind == "skipped" else f"{kind}s"] += 1
            if kind != "skipped":
                why = _first_line(found.get("message")) or _first_line(found.text)
                module = case.get("classname", "?")
                broken[module].append(f"{case.get('name')}: {kind}: {why}")
    failed = counts["failures"] + counts["errors"]
    passed = counts["tests"] - failed - counts["skipped"]
    head = (
        f"SGLang {version}: {passed} passed, {counts['failures']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} skipped"
    )
    if status != 0 and not failed:
        head += f" (pytest exit {status})"
    lines = [f"== summary: {head}"]
    for module in sorted(broken):
        lines.append(f"  {module}")
        lines += [f"    {entry}" for entry in broken[module]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    print(summarize(Path(argv[0]), argv[1], int(argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
