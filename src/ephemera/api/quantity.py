"""Kubernetes `resource.Quantity`: parsing, exact arithmetic, comparison, canonical strings.

This follows `k8s.io/apimachinery/pkg/api/resource` (`quantity.go`, `suffix.go`, `amount.go`)
rule for rule, so the strings ephemera stores and serves are the ones a real apiserver would:

- Grammar: ``[+-]<number><suffix>`` with decimal SI suffixes ``n u m "" k M G T P E``, binary
  SI suffixes ``Ki Mi Gi Ti Pi Ei`` and decimal exponents ``e<int>``/``E<int>``. Errors carry
  upstream's exact messages (`ERR_FORMAT_WRONG`, `ERR_NUMERIC`, `ERR_SUFFIX`).
- Values are exact (an integer coefficient times a power of ten; never a float). Parsing rounds
  a non-zero value finer than 1n away from zero to the nano scale, caps BinarySI magnitudes at
  2^63-1, and turns a BinarySI value between -1 and 1 into DecimalSI, as upstream does.
- The format (DecimalSI, BinarySI, DecimalExponent) is remembered from the suffix and used by
  the canonical form: no fractional digits, the largest suffix that loses nothing
  (``1.5`` -> ``1500m``, ``1536Mi`` stays, ``0.5Gi`` -> ``512Mi``, ``1000m`` -> ``1``).
- Upstream's parser keeps the input spelling verbatim when its fast path judges the input
  already canonical, so ``"+1"``, ``"01"``, ``"1."`` and ``"1E3"`` are served back unchanged;
  `str()` does the same (`canonical()` always gives the computed form).
- Upstream narrows a decimal exponent to int32; that wrap is reproduced at parse time.

Deliberate differences, all outside what a valid object can reach: the int64 accessors
(`value`, `milli_value`, `scaled_value`) saturate at the int64 bounds instead of overflowing;
a BinarySI value with more than six factors of 1024 (only arithmetic makes one) is written as a
decimal exponent instead of upstream's suffix-less (wrong) digits; inputs upstream hangs on
parse quickly; arithmetic that would align two scales more than `MAX_ALIGNMENT_DIGITS` apart
raises `OverflowError` instead of hanging.
"""

from __future__ import annotations

import enum
import functools
import math
from decimal import Decimal
from fractions import Fraction
from typing import Final, NoReturn

__all__ = [
    "ERR_FORMAT_WRONG",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "EXA",
    "GIGA",
    "KILO",
    "MAX_ALIGNMENT_DIGITS",
    "MAX_INT64",
    "MEGA",
    "MICRO",
    "MILLI",
    "MIN_INT64",
    "NANO",
    "PETA",
    "SPLIT_REGEX",
    "TERA",
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "parse_quantity",
    "quantity_from_json",
]


class QuantityFormat(enum.StrEnum):
    """How a quantity is written; the values are upstream's `resource.Format` strings."""

    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6
    BINARY_SI = "BinarySI"  # 12Mi (12 * 2^20)
    DECIMAL_SI = "DecimalSI"  # 12M (12 * 10^6)


# Scales (powers of ten) with upstream's names.
NANO: Final = -9
MICRO: Final = -6
MILLI: Final = -3
KILO: Final = 3
MEGA: Final = 6
GIGA: Final = 9
TERA: Final = 12
PETA: Final = 15
EXA: Final = 18

MAX_INT64: Final = 2**63 - 1
MIN_INT64: Final = -(2**63)
# Arithmetic whose operands' exponents differ by more than this many digits raises
# OverflowError (upstream would write out that many digits and hang).
MAX_ALIGNMENT_DIGITS: Final = 100_000

SPLIT_REGEX: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG: Final = "quantities must match the regular expression '" + SPLIT_REGEX + "'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"


class QuantityError(ValueError):
    """A string that is not a quantity; `str(error)` is upstream's message."""


_DIGITS: Final = frozenset("0123456789")
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_DECIMAL_SUFFIX_BY_EXPONENT: Final = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60,
}  # fmt: skip
_BINARY_SUFFIX_BY_POWER_OF_1024: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_FORMATS: Final = (QuantityFormat.DECIMAL_SI, QuantityFormat.DECIMAL_EXPONENT)
_LOG10_2: Final = math.log10(2)


def _wrap_int32(value: int) -> int:
    """Go's conversion of an integer to int32 (two's complement wrap)."""
    return (value + 2**31) % 2**32 - 2**31


def _decimal_digits(magnitude: int) -> int:
    """How many decimal digits the positive integer `magnitude` has (no str() of huge ints)."""
    guess = int(magnitude.bit_length() * _LOG10_2) + 1
    if magnitude < 10 ** (guess - 1):
        return guess - 1
    if magnitude >= 10**guess:
        return guess + 1
    return guess


def _strip_tens(coefficient: int) -> tuple[int, int]:
    """Strip the trailing decimal zeros of a non-zero integer; return it and how many."""
    removed = 0
    step = 1
    while True:
        quotient, remainder = divmod(coefficient, 10**step)
        if remainder:
            if step == 1:
                return coefficient, removed
            step = 1
            continue
        coefficient = quotient
        removed += step
        step *= 2


def _round_away(coefficient: int, exponent: int, scale: int) -> tuple[int, int]:
    """coefficient * 10^exponent rounded away from zero to a multiple of 10^scale."""
    if coefficient == 0 or exponent >= scale:
        return coefficient, exponent
    down = scale - exponent
    sign = -1 if coefficient < 0 else 1
    magnitude = abs(coefficient)
    if down > _decimal_digits(magnitude):
        return sign, scale
    quotient, remainder = divmod(magnitude, 10**down)
    if remainder:
        quotient += 1
    return sign * quotient, scale


def _fail(message: str) -> NoReturn:
    raise QuantityError(message)


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """Upstream's `parseQuantityString`: split into sign, value, integer digits, fraction, suffix.

    It is more lenient than the documented grammar (a number without digits reads as zero),
    exactly as upstream is.
    """
    positive = True
    pos = 0
    end = len(text)
    if pos < end:
        if text[0] == "-":
            positive = False
            pos += 1
        elif text[0] == "+":
            pos += 1

    # Leading zeros.
    i = pos
    while True:
        if i >= end:
            return positive, "0", "0", "", ""
        if text[i] != "0":
            break
        pos += 1
        i += 1

    # The integer part.
    i = pos
    while True:
        if i >= end:
            return positive, text, text[pos:end], "", ""
        if text[i] not in _DIGITS:
            num = text[pos:i]
            pos = i
            break
        i += 1
    if not num:
        num = "0"

    # The fraction.
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        i = pos
        while True:
            if i >= end:
                return positive, text, num, text[pos:end], ""
            if text[i] not in _DIGITS:
                denom = text[pos:i]
                pos = i
                break
            i += 1
    value = text[:pos]

    # The suffix: suffix letters, then an optional sign and digits.
    suffix_start = pos
    i = pos
    while True:
        if i >= end:
            return positive, value, num, denom, text[suffix_start:end]
        if text[i] not in _SUFFIX_CHARS:
            pos = i
            break
        i += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    i = pos
    while True:
        if i >= end:
            return positive, value, num, denom, text[suffix_start:end]
        if text[i] not in _DIGITS:
            break
        i += 1
    _fail(ERR_FORMAT_WRONG)


def _go_parse_int64(text: str) -> int | None:
    """Go's `strconv.ParseInt(text, 10, 64)`, or None where it fails."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or any(c not in _DIGITS for c in digits):
        return None
    value = int(text)
    if value < MIN_INT64 or value > MAX_INT64:
        return None
    return value


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat] | None:
    """Upstream's `quantitySuffixer.interpret`: (base, exponent, format) or None."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], QuantityFormat.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        parsed = _go_parse_int64(suffix[1:])
        if parsed is None:
            return None
        return 10, _wrap_int32(parsed), QuantityFormat.DECIMAL_EXPONENT
    return None


# Texts parsed lately and their quantities (immutable, so shared): a write parses the same
# few spellings (`10m`, `16Mi`) again and again, in defaulting and in validation. Only short
# texts are remembered, so that the table stays small whatever clients send (a quantity
# padded with zeros can be as long as a request body).
PARSE_CACHE = 4096
PARSE_CACHE_MAX_TEXT = 64


def parse_quantity(text: str) -> Quantity:
    """Upstream's `ParseQuantity`; raises `QuantityError` with upstream's message."""
    if not isinstance(text, str):
        raise TypeError(f"a quantity is parsed from a string, not {type(text).__name__}")
    text = str(text)
    if len(text) > PARSE_CACHE_MAX_TEXT:
        return _parse_text(text)
    return _parse_remembered(text)


def _parse_text(text: str) -> Quantity:
    """`parse_quantity` of a `str`, computed."""
    if text == "":
        _fail(ERR_FORMAT_WRONG)
    if text == "0":
        return Quantity._make(0, 0, QuantityFormat.DECIMAL_SI, spelling="0", spelling_scale=0)

    positive, value, num, denom, suffix = _scan(text)
    interpreted = _interpret_suffix(suffix)
    if interpreted is None:
        _fail(ERR_SUFFIX)
    base, exponent, fmt = interpreted

    # The int64 fast path, with its test for reusing the input spelling.
    mantissa = 1
    if fmt is QuantityFormat.BINARY_SI:
        scale = 0
        if exponent >= 0 and not denom:
            mantissa = 1 << exponent
            precision = 15 - len(num) - exponent * 3 // 10 - 1
        else:
            precision = -1
    else:
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    if precision >= 0:
        scale = _wrap_int32(scale - len(denom))
        if scale >= NANO:
            shifted = num + denom
            digits_value = int(shifted)
            result = digits_value * mantissa
            if result <= MAX_INT64:
                if not positive:
                    result = -result
                keep = False
                if fmt is QuantityFormat.BINARY_SI:
                    keep = exponent % 10 == 0 and digits_value & 0x07 != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity._make(
                    result, scale, fmt, spelling=text if keep else None, spelling_scale=scale
                )

    # The exact (inf.Dec) path.
    sign_and_number = value.lstrip("+-")
    negative = value.startswith("-")
    whole, _, fraction = sign_and_number.partition(".")
    if not (whole + fraction):
        _fail(ERR_NUMERIC)
    magnitude = int(whole + fraction)
    amount_exponent = -len(fraction)
    if base == 10:
        amount_exponent += exponent
    else:
        magnitude <<= exponent
    if magnitude:
        magnitude, amount_exponent = _round_away(magnitude, amount_exponent, NANO)
    if fmt is QuantityFormat.BINARY_SI:
        if _cmp_parts(magnitude, amount_exponent, MAX_INT64, 0) > 0:
            magnitude, amount_exponent = MAX_INT64, 0
        if magnitude and _cmp_parts(magnitude, amount_exponent, 1, 0) < 0:
            fmt = QuantityFormat.DECIMAL_SI
    return Quantity._make(-magnitude if negative else magnitude, amount_exponent, fmt)


# `_parse_text` of a short text, remembered (its errors are raised every time, not remembered).
_parse_remembered = functools.lru_cache(maxsize=PARSE_CACHE)(_parse_text)


def quantity_from_json(value: object) -> Quantity:
    """Decode a quantity from a JSON value as upstream's `UnmarshalJSON` does.

    A string is trimmed of surrounding whitespace; a number is read from its text (pass
    numbers as `int`, `Decimal` or the original text to keep their exact spelling); `None`
    (JSON null) is zero.
    """
    if value is None:
        return Quantity()
    if isinstance(value, str):
        return parse_quantity(value.strip())
    if isinstance(value, bool):
        raise QuantityError(ERR_FORMAT_WRONG)
    if isinstance(value, int | Decimal):
        return parse_quantity(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            _fail(ERR_FORMAT_WRONG)
        return parse_quantity(repr(value))
    raise QuantityError(ERR_FORMAT_WRONG)


def _cmp_parts(c1: int, e1: int, c2: int, e2: int) -> int:
    """Compare c1 * 10^e1 with c2 * 10^e2 exactly, without writing out huge powers of ten."""
    s1 = (c1 > 0) - (c1 < 0)
    s2 = (c2 > 0) - (c2 < 0)
    if s1 != s2:
        return 1 if s1 > s2 else -1
    if s1 == 0:
        return 0
    m1, m2 = abs(c1), abs(c2)
    top1 = e1 + _decimal_digits(m1)
    top2 = e2 + _decimal_digits(m2)
    if top1 != top2:
        magnitude_order = 1 if top1 > top2 else -1
    else:
        low = min(e1, e2)
        a = m1 * 10 ** (e1 - low)
        b = m2 * 10 ** (e2 - low)
        magnitude_order = (a > b) - (a < b)
    return magnitude_order * s1


class Quantity:
    """An immutable, hashable Kubernetes quantity: an exact value and the format it is written in.

    Equality, hashing and ordering follow the value only (`Quantity("1Gi")` equals
    `parse_quantity("1073741824")`), as upstream's `Cmp`/`Equal` do. `str()` is upstream's
    `String()`. Arithmetic follows upstream's `Add`/`Sub`/`Mul`/`Neg`: the result keeps the left
    operand's format unless the left operand is zero, in which case it takes the right one's.
    A quantity is always truthy; test `is_zero()` for zero.
    """

    __slots__ = ("_coefficient", "_exponent", "_format", "_spelling", "_spelling_scale", "_text")

    _coefficient: int
    _exponent: int
    _format: QuantityFormat
    _spelling: str | None
    _spelling_scale: int
    _text: str | None

    def __init__(
        self,
        coefficient: int = 0,
        exponent: int = 0,
        format: QuantityFormat = QuantityFormat.DECIMAL_SI,
    ) -> None:
        """The exact value `coefficient * 10**exponent` in `format` (upstream's
        `NewScaledQuantity`/`NewDecimalQuantity`; nothing is rounded)."""
        if isinstance(coefficient, bool) or not isinstance(coefficient, int):
            raise TypeError("coefficient must be an int")
        if isinstance(exponent, bool) or not isinstance(exponent, int):
            raise TypeError("exponent must be an int")
        self._init(coefficient, exponent, QuantityFormat(format), None, 0)

    def _init(
        self,
        coefficient: int,
        exponent: int,
        fmt: QuantityFormat,
        spelling: str | None,
        spelling_scale: int,
    ) -> None:
        if coefficient == 0:
            exponent = 0
        else:
            coefficient, zeros = _strip_tens(coefficient)
            exponent += zeros
        object.__setattr__(self, "_coefficient", coefficient)
        object.__setattr__(self, "_exponent", exponent)
        object.__setattr__(self, "_format", fmt)
        object.__setattr__(self, "_spelling", spelling)
        object.__setattr__(self, "_spelling_scale", spelling_scale)
        object.__setattr__(self, "_text", spelling)

    @classmethod
    def _make(
        cls,
        coefficient: int,
        exponent: int,
        fmt: QuantityFormat,
        *,
        spelling: str | None = None,
        spelling_scale: int = 0,
    ) -> Quantity:
        q = cls.__new__(cls)
        q._init(coefficient, exponent, fmt, spelling, spelling_scale)
        return q

    # -- construction -------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Same as `parse_quantity`."""
        return parse_quantity(text)

    @classmethod
    def from_int(cls, value: int, format: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Upstream's `NewQuantity(value, format)`."""
        return cls(value, 0, format)

    @classmethod
    def from_milli(cls, value: int, format: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Upstream's `NewMilliQuantity(value, format)`: value / 1000."""
        return cls(value, MILLI, format)

    @classmethod
    def from_scaled(
        cls, value: int, scale: int, format: QuantityFormat = QuantityFormat.DECIMAL_SI
    ) -> Quantity:
        """Upstream's `NewScaledQuantity(value, scale)`: value * 10^scale."""
        return cls(value, scale, format)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Quantity is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Quantity is immutable")

    def __copy__(self) -> Quantity:
        return self

    def __deepcopy__(self, memo: object) -> Quantity:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _restore,
            (
                self._coefficient,
                self._exponent,
                self._format.value,
                self._spelling,
                self._spelling_scale,
            ),
        )

    # -- inspection ---------------------------------------------------------------------

    @property
    def format(self) -> QuantityFormat:
        return self._format

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._coefficient > 0) - (self._coefficient < 0)

    def is_zero(self) -> bool:
        return self._coefficient == 0

    def as_fraction(self) -> Fraction:
        """The exact value."""
        if self._exponent >= 0:
            return Fraction(self._coefficient * 10**self._exponent)
        return Fraction(self._coefficient, 10 ** (-self._exponent))

    def as_decimal(self) -> Decimal:
        """The exact value as a `Decimal` (no context rounding)."""
        digits = tuple(int(c) for c in str(abs(self._coefficient)))
        return Decimal((1 if self._coefficient < 0 else 0, digits, self._exponent))

    def as_approximate_float(self) -> float:
        """The nearest float (upstream's `AsApproximateFloat64`); may be inf."""
        return float(self.as_decimal())

    def scaled_value(self, scale: int) -> int:
        """ceil(|q| / 10^scale) with q's sign (rounded away from zero), saturated to int64."""
        if self._coefficient == 0:
            return 0
        sign = self.sign()
        magnitude = abs(self._coefficient)
        shift = self._exponent - scale
        if shift >= 0:
            if _decimal_digits(magnitude) + shift > 19:
                return MAX_INT64 if sign > 0 else MIN_INT64
            result = sign * magnitude * 10**shift
        else:
            result = _round_away(self._coefficient, self._exponent, scale)[0]
        return max(MIN_INT64, min(MAX_INT64, result))

    def value(self) -> int:
        """Upstream's `Value()`: the value rounded up (away from zero) to an integer."""
        return self.scaled_value(0)

    def milli_value(self) -> int:
        """Upstream's `MilliValue()`: ceil(q * 1000), away from zero."""
        return self.scaled_value(MILLI)

    # -- rounding -----------------------------------------------------------------------

    def round_up(self, scale: int) -> Quantity:
        """Upstream's `RoundUp(scale)`: rounded away from zero to a multiple of 10^scale.

        The rounding lost nothing exactly when the result equals `self`. The input spelling
        upstream keeps survives when upstream keeps it (`"1.5"` stays `"1.5"` at milli scale).
        """
        coefficient, exponent = _round_away(self._coefficient, self._exponent, scale)
        keep = self._spelling is not None and self._spelling_scale >= scale
        if keep and coefficient == self._coefficient and exponent == self._exponent:
            return self
        return Quantity._make(
            coefficient,
            exponent,
            self._format,
            spelling=self._spelling if keep else None,
            spelling_scale=self._spelling_scale,
        )

    # -- comparison ---------------------------------------------------------------------

    def cmp(self, other: Quantity) -> int:
        """Upstream's `Cmp`: -1, 0 or 1 by exact value."""
        return _cmp_parts(self._coefficient, self._exponent, other._coefficient, other._exponent)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._coefficient == other._coefficient and self._exponent == other._exponent

    def __hash__(self) -> int:
        return hash((self._coefficient, self._exponent))

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.cmp(other) < 0

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.cmp(other) <= 0

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.cmp(other) > 0

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.cmp(other) >= 0

    # -- arithmetic ---------------------------------------------------------------------

    def _combine(self, other: Quantity, other_sign: int) -> Quantity:
        fmt = other._format if self.is_zero() else self._format
        low = min(self._exponent, other._exponent)
        a, b = self._coefficient, other_sign * other._coefficient
        if a == 0 or b == 0:
            return Quantity._make(a + b, self._exponent if b == 0 else other._exponent, fmt)
        shift = abs(self._exponent - other._exponent)
        if shift > MAX_ALIGNMENT_DIGITS:
            raise OverflowError("quantity arithmetic across more than 100000 decimal digits")
        total = a * 10 ** (self._exponent - low) + b * 10 ** (other._exponent - low)
        return Quantity._make(total, low, fmt)

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._combine(other, 1)

    def __radd__(self, other: object) -> Quantity:
        # Lets sum() start from the int 0.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return Quantity() + self
        return NotImplemented

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._combine(other, -1)

    def __neg__(self) -> Quantity:
        return Quantity._make(-self._coefficient, self._exponent, self._format)

    def __abs__(self) -> Quantity:
        return self if self._coefficient >= 0 else -self

    def __mul__(self, factor: int) -> Quantity:
        if isinstance(factor, bool) or not isinstance(factor, int):
            return NotImplemented
        return Quantity._make(self._coefficient * factor, self._exponent, self._format)

    __rmul__ = __mul__

    # -- strings ------------------------------------------------------------------------

    def canonical(self) -> str:
        """The canonical form (upstream's `CanonicalizeBytes`), ignoring any kept spelling."""
        return _canonical(self._coefficient, self._exponent, self._format)

    def __str__(self) -> str:
        """Upstream's `String()`: the kept input spelling, else the canonical form."""
        text = self._text
        if text is None:
            text = self.canonical()
            object.__setattr__(self, "_text", text)
        return text

    def to_json(self) -> str:
        """The JSON value (a string), as upstream's `MarshalJSON` writes it."""
        return str(self)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _restore(
    coefficient: int, exponent: int, fmt: str, spelling: str | None, spelling_scale: int
) -> Quantity:
    return Quantity._make(
        coefficient, exponent, QuantityFormat(fmt), spelling=spelling, spelling_scale=spelling_scale
    )


def _canonical(coefficient: int, exponent: int, fmt: QuantityFormat) -> str:
    if coefficient == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI:
        if exponent < 0 or _cmp_parts(abs(coefficient), exponent, 1024, 0) < 0:
            # Below 1024 in magnitude, or fractional: written as DecimalSI.
            fmt = QuantityFormat.DECIMAL_SI
        elif exponent < 70:
            # 10^70 already holds seven factors of 1024, one past Ei.
            number = coefficient * 10**exponent
            magnitude = abs(number)
            powers = ((magnitude & -magnitude).bit_length() - 1) // 10
            if powers <= 6:
                return f"{number >> (10 * powers)}{_BINARY_SUFFIX_BY_POWER_OF_1024[powers]}"
            fmt = QuantityFormat.DECIMAL_EXPONENT
        else:
            fmt = QuantityFormat.DECIMAL_EXPONENT
    remainder = exponent % 3
    mantissa = coefficient * 10**remainder
    exponent -= remainder
    if fmt is QuantityFormat.DECIMAL_SI and exponent in _DECIMAL_SUFFIX_BY_EXPONENT:
        return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"
    if exponent == 0:
        return f"{mantissa}"
    return f"{mantissa}e{exponent}"
