"""resource.Quantity: parse, canonical strings, comparison, arithmetic and rounding.

The tables come from upstream's `quantity_test.go` (TestQuantityParse, TestQuantityString,
TestQuantityParseEmit, TestQuantityRoundUp, TestScaledValue, TestNewSet, TestMilliNewSet,
TestAdd/TestSub, TestJSONWhitespace), the v1.37 decode corpus and the known-deviation list of
`quantity_exact_policy_test.go` (the verbatim spellings upstream keeps).
"""

from __future__ import annotations

import copy
import math
import pickle
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ephemera.api.quantity import (
    ERR_FORMAT_WRONG,
    ERR_NUMERIC,
    ERR_SUFFIX,
    MAX_INT64,
    MILLI,
    MIN_INT64,
    NANO,
    Quantity,
    QuantityError,
    QuantityFormat,
    parse_quantity,
    quantity_from_json,
)

DSI = QuantityFormat.DECIMAL_SI
BSI = QuantityFormat.BINARY_SI
DEX = QuantityFormat.DECIMAL_EXPONENT


def F(coefficient: int, exponent: int = 0) -> Fraction:
    return Fraction(coefficient) * Fraction(10) ** exponent


# --- parsing ----------------------------------------------------------------------------------

# (input, exact value, format), from TestQuantityParse.
PARSE_TABLE: list[tuple[str, Fraction, QuantityFormat]] = [
    ("0", F(0), DSI), ("0n", F(0), DSI), ("0u", F(0), DSI), ("0m", F(0), DSI),
    ("0Ki", F(0), BSI), ("0k", F(0), DSI), ("0Mi", F(0), BSI), ("0M", F(0), DSI),
    ("0Gi", F(0), BSI), ("0G", F(0), DSI), ("0Ti", F(0), BSI), ("0T", F(0), DSI),
    ("1", F(1), DSI),
    ("1Ki", F(1024), BSI), ("8Ki", F(8 * 1024), BSI), ("7Mi", F(7 * 2**20), BSI),
    ("6Gi", F(6 * 2**30), BSI), ("5Ti", F(5 * 2**40), BSI), ("4Pi", F(4 * 2**50), BSI),
    ("3Ei", F(3 * 2**60), BSI), ("10Ti", F(10 * 2**40), BSI), ("100Ti", F(100 * 2**40), BSI),
    ("5n", F(5, -9), DSI), ("4u", F(4, -6), DSI), ("3m", F(3, -3), DSI), ("9", F(9), DSI),
    ("8k", F(8, 3), DSI), ("50k", F(5, 4), DSI), ("7M", F(7, 6), DSI), ("6G", F(6, 9), DSI),
    ("5T", F(5, 12), DSI), ("40T", F(4, 13), DSI), ("300T", F(3, 14), DSI),
    ("2P", F(2, 15), DSI), ("1E", F(1, 18), DSI),
    ("1E-3", F(1, -3), DEX), ("1e3", F(1, 3), DEX), ("1E6", F(1, 6), DEX),
    ("1e9", F(1, 9), DEX), ("1E12", F(1, 12), DEX), ("1e15", F(1, 15), DEX),
    ("1E18", F(1, 18), DEX), ("1e14", F(1, 14), DEX), ("1e13", F(1, 13), DEX),
    ("100.035k", F(100035), DSI),
    ("0.001", F(1, -3), DSI), ("0.0005k", F(5, -1), DSI), ("0.005", F(5, -3), DSI),
    ("0.05", F(5, -2), DSI), ("0.5", F(5, -1), DSI), ("0.00050k", F(5, -1), DSI),
    ("0.00500", F(5, -3), DSI), ("0.05000", F(5, -2), DSI), ("0.50000", F(5, -1), DSI),
    ("0.5e0", F(5, -1), DEX), ("0.5e-1", F(5, -2), DEX), ("0.5e-2", F(5, -3), DEX),
    ("10.035M", F(10035, 3), DSI),
    ("1.2e3", F(12, 2), DEX), ("1.3E+6", F(13, 5), DEX), ("1.40e9", F(14, 8), DEX),
    ("1.53E12", F(153, 10), DEX), ("1.6e15", F(16, 14), DEX), ("1.7E18", F(17, 17), DEX),
    ("9.01", F(901, -2), DSI), ("8.1k", F(81, 2), DSI), ("7.123456M", F(7123456), DSI),
    ("6.987654321G", F(6987654321), DSI), ("5.444T", F(5444, 9), DSI),
    ("40.1T", F(401, 11), DSI), ("300.2T", F(3002, 11), DSI), ("2.5P", F(25, 14), DSI),
    ("1.01E", F(101, 16), DSI),
    # Things that saturate or round (up, to the nano scale).
    ("3.001n", F(4, -9), DSI), ("1.1E-9", F(2, -9), DEX), ("0.0000000001", F(1, -9), DSI),
    ("0.0000000005", F(1, -9), DSI), ("0.00000000050", F(1, -9), DSI),
    ("0.5e-9", F(1, -9), DEX), ("0.9n", F(1, -9), DSI), ("0.00000012345", F(124, -9), DSI),
    ("0.00000012354", F(124, -9), DSI), ("9Ei", F(MAX_INT64), BSI),
    ("9223372036854775807Ki", F(MAX_INT64), BSI), ("12E", F(12, 18), DSI),
    # Fractional binary.
    ("100.035Ki", F(10243584, -2), BSI), ("0.5Mi", F(512 * 1024), BSI),
    ("0.05Gi", F(536870912, -1), BSI), ("0.025Ti", F(274877906944, -1), BSI),
    # "Things written by trolls."
    ("0.000000000001Ki", F(2, -9), DSI), (".001", F(1, -3), DSI), (".0001k", F(100, -3), DSI),
    ("1.", F(1), DSI), ("1.G", F(1, 9), DSI),
]  # fmt: skip


@pytest.mark.parametrize(("text", "value", "fmt"), PARSE_TABLE)
def test_parse_value_and_format(text: str, value: Fraction, fmt: QuantityFormat) -> None:
    q = parse_quantity(text)
    assert q.as_fraction() == value
    assert q.format is fmt
    assert parse_quantity("+" + text).as_fraction() == value
    assert parse_quantity("+" + text).format is fmt
    negative = parse_quantity("-" + text)
    assert negative.as_fraction() == -value
    assert negative.format is fmt


INVALID = [
    ("1.1.M", ERR_FORMAT_WRONG), ("1+1.0M", ERR_FORMAT_WRONG), ("0.1mi", ERR_SUFFIX),
    ("0.1am", ERR_FORMAT_WRONG), ("aoeu", ERR_FORMAT_WRONG), (".5i", ERR_SUFFIX),
    ("1i", ERR_SUFFIX), ("-3.01i", ERR_SUFFIX), ("-3.01e-", ERR_SUFFIX),
    (" 1", ERR_FORMAT_WRONG), ("1 ", ERR_FORMAT_WRONG), ("", ERR_FORMAT_WRONG),
    ("1K", ERR_SUFFIX), ("1ki", ERR_SUFFIX), ("1KiB", ERR_FORMAT_WRONG), ("1Gb", ERR_FORMAT_WRONG),
    ("10%", ERR_FORMAT_WRONG), ("1e", ERR_SUFFIX), ("1e99999999999999999999", ERR_SUFFIX),
    ("Pi", ERR_NUMERIC), ("Ei", ERR_NUMERIC), (".Pi", ERR_NUMERIC), ("e-10", ERR_NUMERIC),
    ("1\u0661", ERR_FORMAT_WRONG),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_quantities_carry_upstream_messages(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert str(err.value) == message


def test_format_error_message_is_upstreams() -> None:
    assert ERR_FORMAT_WRONG == (
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    assert ERR_NUMERIC == "unable to parse numeric part of quantity"
    assert ERR_SUFFIX == "unable to parse quantity's suffix"


@pytest.mark.parametrize(
    ("text", "fmt"),
    [(".", DSI), ("-", DSI), ("+", DSI), ("m", DSI), ("e3", DEX), ("E3", DEX), ("Ti", BSI),
     (".Ki", BSI), ("0.0Ei", BSI), ("00", DSI), ("-0", DSI), ("0e2147483648", DEX)],
)  # fmt: skip
def test_upstream_reads_a_number_without_digits_as_zero(text: str, fmt: QuantityFormat) -> None:
    q = parse_quantity(text)
    assert q.is_zero()
    assert q.format is fmt
    assert str(q) == "0"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e4294967296", F(1)), ("1e4294967295", F(1, -1)), ("5e-4294967297", F(5, -1)),
     ("7e8589934592", F(7)), ("1e-1000", F(1, -9)), ("12e-10", F(2, -9))],
)  # fmt: skip
def test_decimal_exponent_wraps_to_int32_like_upstream(text: str, value: Fraction) -> None:
    assert parse_quantity(text).as_fraction() == value


def test_huge_exponents_parse_and_compare_without_materializing() -> None:
    big = parse_quantity("01e-2147483649")  # the exponent wraps to 2^31-1
    assert str(big) == "10e2147483646"
    assert big == parse_quantity("1e2147483647")
    assert big > parse_quantity("9Ei")
    assert big.value() == MAX_INT64
    assert (-big).milli_value() == MIN_INT64
    assert parse_quantity("1e-2147483630") == parse_quantity("1n")  # upstream hangs here
    with pytest.raises(OverflowError):
        _ = big + parse_quantity("1")


# --- canonical strings ------------------------------------------------------------------------

# (value as coefficient/exponent/format, String(), an alternate spelling that parses to it),
# from TestQuantityString.
STRING_TABLE = [
    (2**30, 0, BSI, "1Gi", "1024Mi"), (300 * 2**20, 0, BSI, "300Mi", "307200Ki"),
    (6 * 1024, 0, BSI, "6Ki", ""), (1001 * 2**30, 0, BSI, "1001Gi", "1025024Mi"),
    (2**40, 0, BSI, "1Ti", "1024Gi"), (5, 0, BSI, "5", "5000m"), (500, -3, BSI, "500m", "0.5"),
    (1, 9, DSI, "1G", "1000M"), (1000, 6, DSI, "1G", "0.001T"), (1000000, 3, DSI, "1G", ""),
    (1000000000, 0, DSI, "1G", ""), (1, -3, DSI, "1m", "1000u"), (80, -3, DSI, "80m", ""),
    (1080, -3, DSI, "1080m", "1.08"), (108, -2, DSI, "1080m", "1080000000n"),
    (10800, -4, DSI, "1080m", ""), (300, 6, DSI, "300M", ""), (1, 12, DSI, "1T", ""),
    (1, 18, DSI, "1E", ""), (1, 21, DSI, "1e21", "1000E"), (5, 21, DSI, "5e21", "5000E"),
    (1, 24, DSI, "1e24", "1000000E"), (1234567, 6, DSI, "1234567M", ""),
    (1234567, -3, BSI, "1234567m", ""), (3, 3, DSI, "3k", ""), (1025, 0, BSI, "1025", ""),
    (0, 0, DSI, "0", ""), (0, 0, BSI, "0", ""), (1, 9, DEX, "1e9", ".001e12"),
    (1, -3, DEX, "1e-3", "0.001e0"), (1, -9, DEX, "1e-9", "1000e-12"), (80, -3, DEX, "80e-3", ""),
    (300, 6, DEX, "300e6", ""), (1, 12, DEX, "1e12", ""), (1, 3, DEX, "1e3", ""),
    (3, 3, DEX, "3e3", ""), (0, 0, DEX, "0", "00"), (1, -9, DSI, "1n", ""),
    (80, -9, DSI, "80n", ""), (1080, -9, DSI, "1080n", ""), (108, -8, DSI, "1080n", ""),
    (10800, -10, DSI, "1080n", ""), (1, -6, DSI, "1u", ""), (80, -6, DSI, "80u", ""),
    (1080, -6, DSI, "1080u", ""),
]  # fmt: skip


@pytest.mark.parametrize(("coefficient", "exponent", "fmt", "expect", "alternate"), STRING_TABLE)
def test_canonical_string(
    coefficient: int, exponent: int, fmt: QuantityFormat, expect: str, alternate: str
) -> None:
    q = Quantity(coefficient, exponent, fmt)
    assert str(q) == expect
    assert q.to_json() == expect
    assert str(parse_quantity(expect)) == expect
    if alternate:
        assert str(parse_quantity(alternate)) == expect
        assert parse_quantity(alternate) == q
    if coefficient:
        assert str(-q) == "-" + expect


@pytest.mark.parametrize(
    ("text", "expect"),
    [("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1000M", "1G"),
     (".001Ki", "1024m"), (".000001Ki", "1024u"), (".000000001Ki", "1024n"),
     (".000000000001Ki", "2n"),
     # The brief's and the reference's examples.
     ("1000m", "1"), ("1536Mi", "1536Mi"), ("0.5Gi", "512Mi"), ("1.5", "1500m"),
     ("1.5Gi", "1536Mi"), ("2048Ki", "2Mi"), ("0.5Ki", "512"), ("1e4", "10e3"),
     ("12e6", "12e6"), ("0.1", "100m"), (".5", "500m"), ("1500", "1500"), ("1000", "1k"),
     ("1u", "1u"), ("9Ei", "9223372036854775807"), ("7Ei", "7Ei"), ("1000E", "1e21"),
     ("1.01E", "1010P"), ("0.9n", "1n")],
)  # fmt: skip
def test_parse_then_string(text: str, expect: str) -> None:
    assert str(parse_quantity(text)) == expect
    if expect != "0":
        assert str(parse_quantity("-" + text)) == "-" + expect


@pytest.mark.parametrize(
    "text",
    ["+1", "01", "1.", "5.", "1E3", "1e+21", "1e0", "123e0", "1.500", "100.035k", "+1Ki",
     "-1.01E-1", "1025Ki"],
)  # fmt: skip
def test_fast_path_keeps_the_input_spelling_like_upstream(text: str) -> None:
    q = parse_quantity(text)
    assert str(q) == text
    assert q.canonical() != text or text == "1025Ki"


def test_kept_spelling_survives_milli_rounding_but_not_arithmetic() -> None:
    q = parse_quantity("+1")
    assert str(q.round_up(MILLI)) == "+1"
    assert str(q + Quantity()) == "1"
    assert str(-q) == "-1"
    # A kept spelling at milli scale survives RoundUp(-3) but not a coarser rounding.
    assert str(parse_quantity("1.500").round_up(MILLI)) == "1.500"
    assert str(parse_quantity("1.500").round_up(-2)) == "1500m"


# --- rounding and accessors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scale", "expect", "exact"),
    [("9.01", -3, F(901, -2), True), ("9.01", -2, F(901, -2), True),
     ("9.01", -1, F(91, -1), False), ("9.01", 0, F(10), False), ("9.01", 1, F(10), False),
     ("9.01", 2, F(100), False), ("-9.01", -3, F(-901, -2), True),
     ("-9.01", -2, F(-901, -2), True), ("-9.01", -1, F(-91, -1), False),
     ("-9.01", 0, F(-10), False), ("-9.01", 1, F(-10), False), ("-9.01", 2, F(-100), False),
     ("1u", MILLI, F(1, -3), False), ("1500u", MILLI, F(2, -3), False), ("0", MILLI, F(0), True)],
)  # fmt: skip
def test_round_up(text: str, scale: int, expect: Fraction, exact: bool) -> None:
    q = parse_quantity(text)
    rounded = q.round_up(scale)
    assert rounded.as_fraction() == expect
    assert (rounded == q) is exact
    assert rounded.format is q.format


def test_round_up_to_milli_as_defaulting_does() -> None:
    assert str(parse_quantity("1u").round_up(MILLI)) == "1m"
    assert str(parse_quantity("0.0001").round_up(MILLI)) == "1m"
    # 1.0005 * 2^30 = 1074278694.912
    assert str(parse_quantity("1.0005Gi").round_up(MILLI)) == "1074278694912m"
    assert str(parse_quantity("100m").round_up(MILLI)) == "100m"
    assert str(parse_quantity("1Gi").round_up(MILLI)) == "1Gi"


@pytest.mark.parametrize(
    ("from_scale", "to_scale", "expected"),
    [(-9, -9, 1), (-9, -6, 1), (-9, -3, 1), (-9, 0, 1), (-6, -9, 1000), (-6, -6, 1),
     (-6, -3, 1), (-6, 0, 1), (-3, -9, 10**6), (-3, -6, 1000), (-3, -3, 1), (-3, 0, 1),
     (0, -9, 10**9), (0, -6, 10**6), (0, -3, 1000), (0, 0, 1), (2, -2, 10**4)],
)  # fmt: skip
def test_scaled_value(from_scale: int, to_scale: int, expected: int) -> None:
    assert Quantity.from_scaled(1, from_scale).scaled_value(to_scale) == expected


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [("1", 1, 1000), ("1.5", 2, 1500), ("-1.5", -2, -1500), ("1n", 1, 1), ("-1n", -1, -1),
     ("1Gi", 2**30, 2**30 * 1000), ("0", 0, 0), ("9Ei", MAX_INT64, MAX_INT64),
     ("-9223372036854775808", MIN_INT64, MIN_INT64), ("1e30", MAX_INT64, MAX_INT64)],
)  # fmt: skip
def test_value_and_milli_value_round_away_from_zero(text: str, value: int, milli: int) -> None:
    q = parse_quantity(text)
    assert q.value() == value
    assert q.milli_value() == milli


@pytest.mark.parametrize(
    ("value", "fmt", "expect"),
    [(1, DSI, "1"), (1000, DSI, "1k"), (1234000, DSI, "1234k"), (1024, BSI, "1Ki"),
     (1000000, DEX, "1e6"), (1024 * 1024, BSI, "1Mi")],
)  # fmt: skip
def test_from_int(value: int, fmt: QuantityFormat, expect: str) -> None:
    q = Quantity.from_int(value, fmt)
    assert str(q) == expect
    assert parse_quantity(str(q)).value() == value


@pytest.mark.parametrize(
    ("value", "fmt", "expect"),
    [(1, DSI, "1m"), (1000, DSI, "1"), (1234000, DSI, "1234"), (1024, BSI, "1024m"),
     (1000000, DEX, "1e3"), (1024 * 1024, BSI, "1048576m")],
)  # fmt: skip
def test_from_milli(value: int, fmt: QuantityFormat, expect: str) -> None:
    q = Quantity.from_milli(value, fmt)
    assert str(q) == expect
    assert q.milli_value() == value


# --- comparison and arithmetic ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "expect"),
    [("0", "0", 0), ("100m", "50m", 1), ("50m", "100m", -1), ("10000T", "100Gi", 1),
     ("1Gi", "1073741824", 0), ("1k", "1e3", 0), ("1", "999999999n", 1), ("-1", "1n", -1),
     ("0", "-0", 0)],
)  # fmt: skip
def test_cmp(x: str, y: str, expect: int) -> None:
    a, b = parse_quantity(x), parse_quantity(y)
    assert a.cmp(b) == expect
    assert b.cmp(a) == -expect
    assert (a == b) is (expect == 0)
    assert (a < b) is (expect < 0)
    assert (a >= b) is (expect >= 0)
    if expect == 0:
        assert hash(a) == hash(b)


def test_add_and_sub_keep_the_left_format_unless_it_is_zero() -> None:
    ten_dsi, ten_bsi = Quantity(10, 0, DSI), Quantity(10, 0, BSI)
    assert (ten_dsi + Quantity(1, 1, DSI)) == Quantity(20)
    assert (ten_dsi + Quantity(1, 0, BSI)).format is DSI
    assert (ten_bsi + Quantity(1, 0, DSI)).format is BSI
    assert (ten_dsi - Quantity(1, 0, BSI)) == Quantity(9)
    assert (Quantity() - Quantity(50)) == Quantity(-50)
    for text in ("100m", "1Gi"):  # TestQuantityAddZeroPreservesSuffix and ...SubZero...
        value = parse_quantity(text)
        assert str(value + parse_quantity("0")) == text
        assert str(parse_quantity("0") + value) == text
        assert str(value - parse_quantity("0")) == text
        assert str(parse_quantity("0") - value) == "-" + text
    assert str(sum([parse_quantity("1Gi"), parse_quantity("512Mi")])) == "1536Mi"


def test_neg_and_mul() -> None:
    assert str(-Quantity(901, -2, DSI)) == "-9010m"
    assert Quantity(10) * 10 == Quantity(100)
    assert str(3 * parse_quantity("1Gi")) == "3Gi"
    assert (Quantity(MAX_INT64) * 2).as_fraction() == 2 * MAX_INT64
    assert abs(parse_quantity("-1Gi")) == parse_quantity("1Gi")
    most_negative = Quantity(MIN_INT64)
    negated = -most_negative
    assert str(negated) == "9223372036854775808"
    assert -negated == most_negative


def test_exact_views() -> None:
    q = parse_quantity("1.5Gi")
    assert q.as_fraction() == Fraction(3 * 2**29)
    assert q.as_decimal() == Decimal(3 * 2**29)
    assert parse_quantity("-12m").as_decimal() == Decimal("-0.012")
    assert parse_quantity("2Ki").as_approximate_float() == 2048.0
    assert math.isinf(parse_quantity("1e400").as_approximate_float())
    assert q.sign() == 1 and (-q).sign() == -1 and Quantity().sign() == 0


def test_quantity_is_immutable_hashable_and_copyable() -> None:
    q = parse_quantity("+1")
    with pytest.raises(AttributeError):
        q._coefficient = 2
    assert {q: "x"}[parse_quantity("1000m")] == "x"
    assert copy.deepcopy(q) is q
    restored = pickle.loads(pickle.dumps(q))
    assert restored == q and str(restored) == "+1" and restored.format is DSI
    assert repr(parse_quantity("1.5Gi")) == "Quantity('1536Mi')"
    assert bool(Quantity())  # always truthy: use is_zero()
    assert parse_quantity("1") != "1"


@pytest.mark.parametrize(
    ("raw", "expect"),
    [(" 1", "1"), ("1 ", "1"), (1, "1"), (10, "10"), (-1, "-1"), (" -1", "-1"),
     (None, "0"), (Decimal("1.5"), "1500m"), (0.25, "250m"), (1e-05, "10e-6")],
)  # fmt: skip
def test_from_json(raw: object, expect: str) -> None:
    assert str(quantity_from_json(raw)) == expect


@pytest.mark.parametrize("raw", [True, [], {}, float("nan"), "", "1 Gi"])
def test_from_json_rejects_non_quantities(raw: object) -> None:
    with pytest.raises(QuantityError):
        quantity_from_json(raw)


# --- properties -------------------------------------------------------------------------------

formats = st.sampled_from(list(QuantityFormat))


@st.composite
def quantities(draw: st.DrawFn) -> Quantity:
    """Quantities a parse can give back: nano scale or coarser, BinarySI below 2^63."""
    fmt = draw(formats)
    if fmt is BSI:
        magnitude = draw(st.integers(0, MAX_INT64))
        shape = draw(st.integers(0, 2))
        if shape == 0:
            return Quantity(draw(st.sampled_from([1, -1])) * magnitude, 0, fmt)
        if shape == 1:  # like 3Mi
            power = draw(st.integers(0, 5))
            return Quantity(draw(st.integers(-1023, 1023)) << (10 * power), 0, fmt)
        return Quantity(draw(st.integers(-(10**12), 10**12)), draw(st.integers(-9, 0)), fmt)
    coefficient = draw(st.integers(-(10**20), 10**20))
    return Quantity(coefficient, draw(st.integers(NANO, 30)), fmt)


number_text = st.from_regex(r"\A[+-]?(0|[0-9]{1,25})?(\.[0-9]{0,12})?\Z", fullmatch=True)
suffix_text = st.sampled_from(
    ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
) | st.from_regex(r"\A[eE][+-]?[0-9]{1,2}\Z", fullmatch=True)


def _drops_binary_format(q: Quantity) -> bool:
    """A BinarySI value printed without a binary suffix reparses as DecimalSI (upstream too)."""
    return q.format is BSI and not str(q).endswith("i")


@given(quantities())
def test_parse_of_string_round_trips_the_value(q: Quantity) -> None:
    text = str(q)
    assert "." not in text
    again = parse_quantity(text)
    assert again == q
    if not _drops_binary_format(q):
        assert str(again) == text
    # Stable from then on, whatever the format.
    assert str(parse_quantity(str(again))) == str(again)


def test_binary_value_without_binary_suffix_reparses_as_decimal_like_upstream() -> None:
    q = parse_quantity("24.4140625Ki")
    assert (str(q), q.format) == ("25000", BSI)
    again = parse_quantity(str(q))
    assert (str(again), again.format) == ("25k", DSI)
    assert again == q


@given(number_text, suffix_text)
@settings(max_examples=300)
def test_any_parsed_string_is_stable(number: str, suffix: str) -> None:
    try:
        q = parse_quantity(number + suffix)
    except QuantityError:
        return
    text = str(q)
    again = parse_quantity(text)
    assert again == q
    if not _drops_binary_format(q):
        assert str(again) == text
    assert str(parse_quantity(str(again))) == str(again)
    assert parse_quantity(q.canonical()) == q


@given(quantities(), quantities())
def test_ordering_and_arithmetic_follow_the_exact_value(a: Quantity, b: Quantity) -> None:
    fa, fb = a.as_fraction(), b.as_fraction()
    assert (a < b) == (fa < fb)
    assert (a == b) == (fa == fb)
    assert a.cmp(b) == (fa > fb) - (fa < fb)
    if a == b:
        assert hash(a) == hash(b)
    assert (a + b).as_fraction() == fa + fb
    assert (a - b).as_fraction() == fa - fb
    assert max(a, b).as_fraction() == max(fa, fb)


@given(quantities())
def test_value_rounds_away_from_zero(q: Quantity) -> None:
    f = q.as_fraction()
    expect = math.ceil(f) if f >= 0 else math.floor(f)
    assert q.value() == max(MIN_INT64, min(MAX_INT64, expect))
    milli = f * 1000
    expect_milli = math.ceil(milli) if milli >= 0 else math.floor(milli)
    assert q.milli_value() == max(MIN_INT64, min(MAX_INT64, expect_milli))
    rounded = q.round_up(MILLI)
    assert rounded.as_fraction() * 1000 == expect_milli
    assert abs(rounded) >= abs(q)


@given(quantities())
def test_canonical_form_uses_the_largest_suffix(q: Quantity) -> None:
    text = q.canonical()
    match = re.fullmatch(r"(-?[0-9]+)(|[numkMGTPE]|[KMGTPE]i|e-?[0-9]+)", text)
    assert match is not None
    mantissa = match.group(1)
    if text.endswith("i"):
        assert int(mantissa) % 1024 != 0 or text.endswith("Ei")
    elif q.format is BSI and match.group(2) == "" and abs(q) >= Quantity(1024):
        # An integer BinarySI value without factors of 1024 is printed whole (upstream too).
        assert int(mantissa) % 1024 != 0
    elif not q.is_zero():
        assert not mantissa.endswith("000") or text.endswith("E")


def test_only_short_texts_are_remembered() -> None:
    """A short spelling is parsed once and shared; a long one (zeros padding a quantity to
    any length a body allows) is parsed every time and never kept, so the table stays small."""
    from ephemera.api import quantity

    short = "123Mi"
    assert parse_quantity(short) is parse_quantity(short)
    long_text = "0" * (quantity.PARSE_CACHE_MAX_TEXT + 1) + "1"
    before = quantity._parse_remembered.cache_info().currsize
    first, second = parse_quantity(long_text), parse_quantity(long_text)
    assert first == second == parse_quantity("1")
    assert first is not second
    assert quantity._parse_remembered.cache_info().currsize == before
