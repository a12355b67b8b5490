"""The suite's own scheduling: which test files pytest-xdist keeps in one process, and which
units it hands out first."""

from __future__ import annotations

from tests.conftest import LONG_UNITS, SERIAL, SERIAL_FILES, TESTS, longest_first, work_unit_of


def test_every_serial_file_exists_and_is_in_the_serial_unit() -> None:
    for relative in SERIAL_FILES:
        assert (TESTS / relative).is_file(), f"{relative} is in SERIAL_FILES but not in tests/"
        assert work_unit_of(f"tests/{relative}::test_x") == SERIAL


def test_serial_files_are_one_unit_and_any_other_file_a_unit_of_its_own() -> None:
    units = {
        nodeid: work_unit_of(nodeid)
        for nodeid in (
            "tests/operator/test_cluster_run.py::test_a[sglang-0.5.2]",
            "tests/operator/test_cluster_weight_sync.py::test_b",
            "tests/operator/test_operator_e2e.py::test_c",
            "tests/operator/test_operator_e2e.py::test_d",
            "tests/unit/test_suite_groups.py::test_e",
        )
    }
    assert list(units.values()) == [
        SERIAL,
        SERIAL,
        "operator/test_operator_e2e.py",
        "operator/test_operator_e2e.py",
        "unit/test_suite_groups.py",
    ]


def test_every_long_unit_exists() -> None:
    for unit in LONG_UNITS:
        assert unit == SERIAL or (TESTS / unit).is_file(), f"{unit} is in LONG_UNITS, not in tests/"


def test_long_units_come_first_in_their_order_and_the_rest_keep_theirs() -> None:
    units = ["unit/test_a.py", "integration/test_run_user_code.py", "chart/test_b.py", SERIAL]
    assert longest_first(units) == [
        SERIAL,
        "integration/test_run_user_code.py",
        "unit/test_a.py",
        "chart/test_b.py",
    ]
