"""`scripts/sglang_compat_summary.py`: the summary `sglang-compat.sh` prints of one run of the
contract tier, from pytest's JUnit XML: counts, and each failing test with why, by file."""

from __future__ import annotations

from pathlib import Path

from scripts.sglang_compat_summary import summarize

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.contract.test_a" name="test_ok" time="0.1"/>
<testcase classname="tests.contract.test_a" name="test_route" time="0.1">
  <failure message="AssertionError: not routes of SGLang 9.9.9: [('GET', '/x')]">long trace
  </failure>
</testcase>
<testcase classname="tests.contract.test_b" name="test_skipped" time="0.0">
  <skipped message="no"/>
</testcase>
<testcase classname="tests.contract.test_b" name="test_setup" time="0.0">
  <error message="">
fixture 'nope' not found
  </error>
</testcase>
</testsuite></testsuites>
"""


def test_failures_are_listed_by_file_with_why(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(REPORT)
    lines = summarize(report, "9.9.9", 1).splitlines()
    assert lines[0] == "== summary: SGLang 9.9.9: 1 passed, 1 failed, 1 errors, 1 skipped"
    assert lines[1:] == [
        "  tests.contract.test_a",
        "    test_route: failure: AssertionError: not routes of SGLang 9.9.9: [('GET', '/x')]",
        "  tests.contract.test_b",
        "    test_setup: error: fixture 'nope' not found",
    ]


def test_a_tier_that_did_not_start_says_so(tmp_path: Path) -> None:
    text = summarize(tmp_path / "missing.xml", "9.9.9", 4)
    assert text == ("SGLang 9.9.9: the tier did not run (pytest exit 4); the output above says why")
