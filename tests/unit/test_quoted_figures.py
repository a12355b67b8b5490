"""Figures the README and the docs quote are the figures of the results files they come from.

A page marks what it quotes with an HTML comment (invisible on GitHub and on the site) just
before the paragraph, table or list that quotes it:

    <!-- figures from benchmarks/results/local-tiny.json (2026-12-07):
         mean_reward.1-10=0.32; mean_reward.141-150=0.76; dropped_groups=0 -->

Each `path=value` names a figure of the results file (dotted keys, list indices) and the value
as the page writes it. The test reads the file and fails when the value, rounded to the
decimals the page shows, is not the file's; when the text that follows does not quote it
verbatim; or when the date is not in that text (nor the file's own `date`, where it has one).
A rerun of a benchmark that changes a figure therefore fails here until the page says the new
one. Some results are raw per-seed records whose quoted figures the benchmark computes
(bootstrap intervals): `VIEWS` gives such a file the benchmark's own computation.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _stress_report  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

MARKER = re.compile(
    r"<!-- figures from (?P<source>\S+) \((?P<date>\d{4}-\d{2}-\d{2})\):(?P<body>.*?)-->",
    re.DOTALL,
)


def _stress_view(results: dict[str, Any]) -> dict[str, Any]:
    """The staleness stress results as its report computes them: per setting key, the
    aggregate over seeds and the comparison with the baseline (bootstrap intervals)."""
    rows = _stress_report.build_rows(results)
    return {**results, "rows": {row["key"]: row for row in rows}}


VIEWS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "staleness_stress.json": _stress_view,
    "staleness_stress_second.json": _stress_view,
}


@dataclass(frozen=True)
class Quote:
    page: Path
    source: str
    date: str
    figures: dict[str, str]
    text: str
    """The paragraph (or table, or list) after the marker: up to the next blank line."""


def quotes(page: Path, text: str | None = None) -> list[Quote]:
    """Every marker of a page, with the text that follows it."""
    text = page.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in MARKER.finditer(text):
        rest = text[match.end() :].lstrip("\n")
        following = rest.split("\n\n", 1)[0]
        figures = {}
        for item in re.split(r"[;\n]", match["body"]):
            if item.strip():
                path, sep, value = item.strip().partition("=")
                assert sep, f"{page.name}: `{item.strip()}` is not path=value"
                figures[path.strip()] = value.strip()
        found.append(Quote(page, match["source"], match["date"], figures, following))
    return found


def resolve(data: Any, path: str) -> Any:
    """The value at a dotted path (`jobs.long-tail.settings.auto.samples_per_s`, `runs.0`)."""
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def agrees(actual: Any, quoted: str) -> bool:
    """Whether the page's `quoted` is `actual` as the page rounds it: to the decimals shown
    (`0.32` for 0.3211, `+0.0` for 0.0, `83.7` for 83.688); other values exactly."""
    if isinstance(actual, bool) or not isinstance(actual, (int, float)):
        return str(actual) == quoted
    try:
        shown = Decimal(quoted.lstrip("+"))
    except InvalidOperation:
        return False
    exponent = shown.as_tuple().exponent
    assert isinstance(exponent, int)
    half = Decimal(5) * Decimal(10) ** (exponent - 1)
    return abs(Decimal(repr(float(actual))) - shown) <= half + Decimal("1e-12")


def problems(quote: Quote, root: Path = ROOT) -> list[str]:
    """What is wrong with one marker: each figure that the file or the text contradicts."""
    where = f"{quote.page.name}, figures from {quote.source}"
    path = root / quote.source
    if not path.is_file():
        return [f"{where}: no such file"]
    results = json.loads(path.read_text(encoding="utf-8"))
    view = VIEWS.get(path.name, lambda r: r)(results)
    found = []
    # A file's date may carry the time of day after it ("2026-12-07 03:34 UTC").
    if "date" in results and str(results["date"]).split(" ", 1)[0] != quote.date:
        found.append(f"{where}: the marker says {quote.date}, the file {results['date']}")
    if quote.date not in quote.text:
        found.append(f"{where}: the text does not give the date {quote.date}")
    if not quote.figures:
        found.append(f"{where}: the marker names no figure")
    for figure, quoted in quote.figures.items():
        try:
            actual = resolve(view, figure)
        except (KeyError, IndexError, ValueError, TypeError):
            found.append(f"{where}: the file has no figure {figure}")
            continue
        if not agrees(actual, quoted):
            found.append(f"{where}: {figure} is {actual!r} in the file, {quoted} on the page")
        if quoted not in quote.text:
            found.append(f"{where}: {figure}={quoted} is not in the text after the marker")
    return found


ALL = [q for page in PAGES for q in quotes(page)]


@pytest.mark.parametrize(
    "quote", ALL, ids=lambda q: f"{q.page.relative_to(ROOT)}:{Path(q.source).name}"
)
def test_the_quoted_figures_are_the_results_file_s(quote: Quote) -> None:
    assert problems(quote) == []


def test_every_marker_is_read() -> None:
    """A marker the pattern does not read (a date with its time of day, a missing colon) would
    leave its figures unchecked: each `<!-- figures from` must be one `MARKER` matches."""
    unread = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        starts = {m.start() for m in MARKER.finditer(text)}
        for found in re.finditer(r"<!-- figures from ", text):
            if found.start() not in starts:
                line = text.count("\n", 0, found.start()) + 1
                unread.append(f"{page.relative_to(ROOT)}:{line}")
    assert unread == []


def test_the_readme_quotes_its_figures_from_results_files() -> None:
    """The README's results (the local run, staleness stress, the budget, the long tail) are
    all marked; a marker removed with its figures left in place fails here."""
    sources = {q.source for q in ALL if q.page.name == "README.md"}
    assert {
        "benchmarks/results/local-tiny.json",
        "benchmarks/results/staleness_stress.json",
        "benchmarks/results/staleness_budget.json",
        "benchmarks/results/long_tail.json",
    } <= sources


def test_a_figure_the_file_does_not_have_fails(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results" / "r.json"
    results.parent.mkdir(parents=True)
    results.write_text(json.dumps({"date": "2026-12-07", "a": {"b": 0.3211}, "n": [4, 5]}))
    page = tmp_path / "page.md"

    def check(marker: str, text: str) -> list[str]:
        (quote,) = quotes(page, f"{marker}\n{text}\n\nnext paragraph 9.99\n")
        return problems(quote, tmp_path)

    head = "<!-- figures from benchmarks/results/r.json (2026-12-07):"
    assert check(f"{head} a.b=0.32; n.1=5 -->", "0.32 and 5 on 2026-12-07") == []
    assert check(f"{head} a.b=0.3211 -->", "0.3211 (2026-12-07)") == []
    assert "0.3211 in the file, 0.33" in check(f"{head} a.b=0.33 -->", "0.33 on 2026-12-07")[0]
    assert "not in the text" in check(f"{head} a.b=0.32 -->", "0.3 on 2026-12-07")[0]
    assert "no figure a.c" in check(f"{head} a.c=1 -->", "1 on 2026-12-07")[0]
    assert "date" in check(f"{head} n.0=4 -->", "4, measured yesterday")[0]
    other = "<!-- figures from benchmarks/results/r.json (2026-12-06): n.0=4 -->"
    assert "the file 2026-12-07" in check(other, "4 on 2026-12-06")[0]
    assert "9.99" not in quotes(page, f"{head} n.0=4 -->\n4\n\n9.99\n")[0].text


def test_rounding_follows_the_decimals_the_page_shows() -> None:
    shown = [("0.32", 0.3211), ("0.321", 0.3211), ("0.4", 0.3611), ("83.7", 83.68839)]
    shown += [("-0.057", -0.0569), ("+0.0", 0.0), ("+4.4", 4.4), ("66", 66)]
    shown += [("2026-12-07", "2026-12-07")]
    assert [q for q, actual in shown if not agrees(actual, q)] == []
    wrong = [("0.3", 0.3611), ("+4.5", 4.4), ("65", 66), ("half", 0.5), ("0.32", "0.32x")]
    assert [q for q, actual in wrong if agrees(actual, q)] == []


def test_the_budget_tables_are_the_results_file_s() -> None:
    """`docs/benchmarks.md` shows the staleness budget's tables as the benchmark rendered them
    into its results file (`markdown`), not typed in again."""
    results = json.loads((ROOT / "benchmarks/results/staleness_budget.json").read_text())
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert results["markdown"].strip() in page
