"""`JsonLines`: a run's JSON-lines file read back as written, whole rewrites replacing it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dressage.data.jsonl import JsonLines

records = st.lists(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    max_size=5,
)


def test_a_missing_file_holds_no_records(tmp_path: Path) -> None:
    assert JsonLines(tmp_path / "none" / "x.jsonl").read() == []


@given(first=records, then=records)
def test_appends_read_back_in_order_and_a_rewrite_replaces_them(
    first: list[dict[str, object]], then: list[dict[str, object]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        log = JsonLines(Path(root) / "run" / "history.jsonl")
        for record in first:
            log.append(record)
        assert log.read() == first
        log.rewrite(then)
        assert log.read() == then
