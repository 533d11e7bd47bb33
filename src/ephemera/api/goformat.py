"""How Go prints values into the messages ephemera copies from upstream: `go_quote` is
`strconv.Quote` (what `%q` prints for a string), `go_quote_list` is `%q` of a `[]string`,
`go_float` is `%v` of a float64, `go_scalar` is `%v` of a JSON scalar (bool, string, number),
`go_value` is how a field error prints its bad value, `go_json` is `%v` of a decoded JSON
value (`map[a:1 b:[x <nil>]]`), `go_type_name` its `%T`.
The one implementation every message builder uses."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """Go's `strconv.Quote`: printable characters as they are, the usual backslash escapes,
    `\\xNN` below 0x80, `\\uNNNN`/`\\UNNNNNNNN` above; safe in a message and in an HTTP
    header."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'  # (printable ASCII but these two: as it is)
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_quote_list(values: Sequence[str]) -> str:
    """Go's `%q` of a `[]string`: `["a" "b"]`."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"



def go_float(value: float, bits: int = 64) -> str:
    """Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits
    that read back as the same number, with an exponent when it is below -4 or at least 6
    (`1e+06`, `1.5e-05`, `123456`, `0.0001`). With `bits=32`, `FormatFloat(f, 'g', -1, 32)`:
    the value rounded to a float32 (`+Inf` beyond its range) and the shortest digits that
    read back as that float32 (`3.1415927`)."""
    if bits == 32 and not (math.isnan(value) or math.isinf(value)):
        try:
            value = _as_float32(value)
        except OverflowError:
            value = math.copysign(math.inf, value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits, exp = _shortest_digits(abs(value), bits)
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if len(digits) <= exp + 1:
        return sign + digits + "0" * (exp + 1 - len(digits))
    return f"{sign}{digits[:exp + 1]}.{digits[exp + 1:]}"


def _as_float32(value: float) -> float:
    """`value` rounded to the nearest float32 (OverflowError beyond its range)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _shortest_digits(value: float, bits: int) -> tuple[str, int]:
    """The shortest significant digits of a positive finite `value` that read back as the
    same float64 (or float32), and the decimal exponent of the first digit."""
    text = repr(value)  # Python's repr is the shortest round-tripping float64 form
    if bits == 32:
        for precision in range(9):  # a float32 needs at most 9 significant digits
            text = f"{value:.{precision}e}"
            if _as_float32(float(text)) == value:
                break
    parts = Decimal(text).normalize().as_tuple()
    digits = "".join(str(d) for d in parts.digits)
    return digits, len(digits) + int(parts.exponent) - 1


class GoText(str):
    """A bad value already written in Go's notation, which `go_value` prints as it is: for a
    value whose Go type name shows in upstream's message (`go_slice(scopes,
    "core.ResourceQuotaScope")`, `go_string_map(selector)`)."""

    __slots__ = ()


def go_slice(values: Sequence[str], type_name: str = "string") -> GoText:
    """Go's `%#v` of a slice of (named) strings: `[]string{"a", "b"}`."""
    return GoText(f"[]{type_name}{{" + ", ".join(go_quote(v) for v in values) + "}")


def go_string_map(mapping: Mapping[str, str]) -> GoText:
    """Go's `%#v` of a `map[string]string`, keys sorted: `map[string]string{"a":"b"}`."""
    return GoText("map[string]string{" + ", ".join(
        f"{go_quote(k)}:{go_quote(str(mapping[k]))}" for k in sorted(mapping)) + "}")


def go_scalar(value: Any) -> str | None:
    """A JSON scalar as every Go printer here shows it: a bool `true`/`false`, a string
    `%q` (`go_quote`), an int its digits, a float `go_float`; None for anything else (nil,
    collections), which each caller prints its own way."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return None


_INT64 = range(-2**63, 2**63)


def go_json(value: Any) -> str:
    """Go's `%v` (and `%+v`) of a JSON value decoded into an `interface{}` as upstream's
    patch handlers decode it (sigs.k8s.io/json's `PreserveInts`): an integer that fits an
    int64 is an int64 and prints its digits; any other number is a float64 and prints as
    `go_float` (`1e+06` for `1e6`, `1` for `1.0`, `1e+19` for 10000000000000000000); a map
    prints as `map[k:v ...]` with its keys sorted, a slice as `[a b]`, a string bare, nil as
    `<nil>`."""
    if value is None:
        return "<nil>"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_json(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_json(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return go_float(float(value))
    scalar = go_scalar(value)
    return scalar if scalar is not None else str(value)


def go_type_name(value: Any) -> str:
    """Go's `%T` of a JSON value decoded into an `interface{}` as `go_json` decodes it:
    `int64`, `float64`, `string`, `bool`, `map[string]interface {}`, `[]interface {}`,
    `<nil>`."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int) and value in _INT64:
        return "int64"
    if isinstance(value, int | float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "map[string]interface {}" if isinstance(value, dict) else "[]interface {}"


def go_value(value: Any) -> str:
    """A bad value as apimachinery's `field.Error` prints it: strings `%q`, ints, floats and
    bools `%v`, nil as the string `"null"` (Go turns a nil value into "null" and then quotes
    it), a list of strings as Go's `%#v` of a `[]string` (`[]string{"a", "b"}`), `GoText` as
    it is. Objects, whose `%#v` names Go's internal struct types (`core.SELinuxOptions{...}`),
    are printed as compact JSON: ephemera's choice, as the Go type is not known here."""
    if isinstance(value, GoText):
        return str(value)
    scalar = go_scalar(value)
    if scalar is not None:
        return scalar
    if value is None:
        return go_quote("null")
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return go_slice(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def go_error_text(err: BaseException) -> str:
    """An exception's message as a Go error reads, for events and status messages: an
    `OSError` as Go's `*PathError` (`/var/lib/x: no space left on device`, the C library's
    text in lowercase), anything else its own message (its type's name when it has none);
    never a Python repr."""
    if isinstance(err, OSError) and err.strerror:
        text = err.strerror[:1].lower() + err.strerror[1:]
        names = [str(n) for n in (err.filename, err.filename2) if n is not None]
        return f"{' '.join(names)}: {text}" if names else text
    return str(err) or type(err).__name__
