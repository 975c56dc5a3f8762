import pytest

from simulator import SpecsimError
from simulator.ranges import parse_int_range


@pytest.mark.parametrize("text, expected", [
    ("1..4", [1, 2, 3, 4]), ("1..64:x2", [1, 2, 4, 8, 16, 32, 64]), ("0..8:4", [0, 4, 8]), ("1,3,12", [1, 3, 12]),
    ("7", [7]), ("1..3,8", [1, 2, 3, 8]), ("1..256", list(range(1, 257))),
])
def test_ranges(text, expected):
    assert parse_int_range(text) == expected


@pytest.mark.parametrize("text", ["8..1", "a..b", "", "1..4:x1", "1..4:0", "0..8:x2", "1.5"])
def test_bad_ranges(text):
    with pytest.raises(SpecsimError):
        parse_int_range(text)


def test_minimum():
    with pytest.raises(SpecsimError, match=">= 1"):
        parse_int_range("0..4", minimum=1)


def test_maximum_names_the_limit_for_a_single_value_too():
    """A lone value above the maximum said "not an integer" (the bound's error was caught as a parse error)."""
    for text in ("17", "1..17", "1,17"):
        with pytest.raises(SpecsimError, match="17 is above the largest, 16: why"):
            parse_int_range(text, 1, "--k", 16, "why")


def test_positive_float_ranges():
    from simulator.ranges import parse_positive_floats

    assert parse_positive_floats("1..64:x2") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_positive_floats("0.5,2,1") == [0.5, 1, 2]
    assert parse_positive_floats("10..50:10") == [10, 20, 30, 40, 50]
    for bad in ("0", "-1", "4..1", "1..8:x1", "fast", ""):
        with pytest.raises(SpecsimError):
            parse_positive_floats(bad, "rate")


def test_latencies_in_milliseconds():
    from simulator.ranges import parse_latency_s

    assert parse_latency_s("50", "SLO", 1e-5, 60) == pytest.approx(0.05)
    assert parse_latency_s("50ms", "SLO", 1e-5, 60) == pytest.approx(0.05)
    assert parse_latency_s("0.2s", "SLO", 1e-5, 60) == pytest.approx(0.2)
    for bad in ("50us", "0", "-5", "9e9", "soon"):
        with pytest.raises(SpecsimError):
            parse_latency_s(bad, "SLO", 1e-5, 60)
