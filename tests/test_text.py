"""The number formatter and the tables: exact forms, and properties over random values."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from typedflops.text import fit_table, format_count, format_percent, format_si, wrap_lines

PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
PREFIX.update({"m": 1e-3, "µ": 1e-6, "n": 1e-9})


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (2.1e9, "FLOP", "2.10 GFLOP"),
        (699e6, "FLOP/s", "699 MFLOP/s"),
        (33.5e6, "B", "33.5 MB"),
        (1.2e-3, "s", "1.20 ms"),
        (2.5e-7, "s", "250 ns"),
        (3.0, "s", "3.00 s"),
        (4.398e13, "FLOP", "44.0 TFLOP"),
        (512, "B", "512 B"),
        (0, "FLOP", "0 FLOP"),
        (999.5, "B", "1.00 kB"),
        (-2.5e9, "FLOP/s", "-2.50 GFLOP/s"),
        (5120, "", "5.12k"),
    ],
)
def test_exact_forms(value: float, unit: str, text: str) -> None:
    assert format_si(value, unit) == text


def _parse(text: str, unit: str) -> float:
    match = re.fullmatch(rf"(-?[\d.]+) ([kMGTPEmµn]?){re.escape(unit)}", text)
    assert match, text
    return float(match.group(1)) * PREFIX[match.group(2)]


@given(st.floats(min_value=1e-9, max_value=1e20), st.sampled_from(["s", "FLOP", "B/s"]))
def test_three_significant_digits_in_range(value: float, unit: str) -> None:
    text = format_si(value, unit)
    number = text.split(" ")[0]
    parsed = _parse(text, unit)
    if unit == "s" or value >= 1000:
        assert 1 <= abs(float(number)) < 1000
        assert len(number.replace(".", "").lstrip("0")) == 3
        assert parsed == pytest.approx(value, rel=5e-3)


def test_counts_and_percentages() -> None:
    assert [format_count(n) for n in (12, 5248, 33554432)] == ["12", "5.25k", "33.6M"]
    assert [format_percent(f) for f in (0.182, 0.0049, 1.0, 0.5)] == ["18.2%", "0.49%", "100%",
                                                                       "50.0%"]  # fmt: skip


def test_fit_table_drops_optional_columns_in_order() -> None:
    header = ["model", "median", "bytes", "note"]
    rows = [["Linear", "1.20 ms", "33.5 MB", "x" * 60]]
    table, dropped = fit_table(header, rows, right={1, 2}, optional=[3, 2], width=40)
    assert dropped == ["note"]
    assert table.splitlines() == [
        "model    median    bytes",
        "------  -------  -------",
        "Linear  1.20 ms  33.5 MB",
    ]
    wide, none = fit_table(header, rows, right={1, 2}, optional=[3, 2], width=None)
    assert none == [] and "x" * 60 in wide


@given(st.lists(st.text(alphabet="abc ", min_size=1, max_size=8), min_size=1, max_size=40))
def test_wrapped_lines_fit(words: list[str]) -> None:
    text = "  " + " ".join(words)
    wrapped = wrap_lines(text, width=20)
    assert all(len(line) <= 20 for line in wrapped.splitlines())
    assert wrapped.split() == text.split()


def test_an_indent_that_leaves_a_word_no_room_is_cut() -> None:
    """Fifteen spaces of indent, then ``aaa aa``: the continuation's indent (19) would leave
    no room in 20 for the words; it is cut to what leaves the longest (3) room, 17."""
    wrapped = wrap_lines(" " * 15 + "aaa aa", width=20)
    assert wrapped.splitlines() == [" " * 15 + "aaa", " " * 17 + "aa"]
    assert wrap_lines(" " * 30, width=20) == ""
