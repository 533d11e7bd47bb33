"""The part of Kubernetes' CEL libraries that CRD rules use most, for cel-python: the string
extensions (`lowerAscii`, `upperAscii`, `trim`, `split`, `join`, `replace`, `substring`,
`indexOf`, `lastIndexOf`, `charAt`, `format`), the list library (`isSorted`, `sum`, `min`,
`max`, `indexOf`, `lastIndexOf`) and the checks of the IP, CIDR, URL and quantity libraries
(`isIP`, `isCIDR`, `isURL`, `isQuantity`). The object-returning constructors (`ip()`,
`cidr()`, `url()`, `quantity()`) and their methods are not here: a rule that calls a missing
function is reported as not checked (`ephemera.api.crd.cel.Unsupported`)."""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from celpy import celtypes

from ephemera.api.quantity import Quantity

_Fn = Callable[..., Any]


def _b(value: bool) -> Any:
    return celtypes.BoolType(value)


def _s(value: str) -> Any:
    return celtypes.StringType(value)


def _is_ip(value: Any) -> Any:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return _b(False)
    return _b("%" not in str(value))


def _is_cidr(value: Any) -> Any:
    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return _b(False)
    return _b("/" in str(value))


def _is_url(value: Any) -> Any:
    try:
        parts = urlsplit(str(value))
    except ValueError:
        return _b(False)
    return _b(bool(parts.scheme) and (bool(parts.netloc) or str(value).startswith("/")))


def _is_quantity(value: Any) -> Any:
    try:
        Quantity.parse(str(value))
    except (ValueError, TypeError):
        return _b(False)
    return _b(True)


def _index_of(target: Any, item: Any, *start: Any) -> Any:
    if isinstance(target, str):
        begin = int(start[0]) if start else 0
        return celtypes.IntType(str(target).find(str(item), begin))
    for i, value in enumerate(target):
        if value == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _last_index_of(target: Any, item: Any) -> Any:
    if isinstance(target, str):
        return celtypes.IntType(str(target).rfind(str(item)))
    for i in range(len(target) - 1, -1, -1):
        if target[i] == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _join(items: Any, sep: Any = "") -> Any:
    return _s(str(sep).join(str(i) for i in items))


def _split(text: Any, sep: Any, *limit: Any) -> Any:
    parts = str(text).split(str(sep), int(limit[0]) - 1) if limit and int(limit[0]) > 0 \
        else str(text).split(str(sep))
    return celtypes.ListType([_s(p) for p in parts])


def _replace(text: Any, old: Any, new: Any, *count: Any) -> Any:
    n = int(count[0]) if count else -1
    return _s(str(text).replace(str(old), str(new), n))


def _substring(text: Any, start: Any, *end: Any) -> Any:
    return _s(str(text)[int(start):int(end[0])] if end else str(text)[int(start):])


_VERB = re.compile(r"%([sdfeobxX%])")


def _format(template: Any, args: Any) -> Any:
    values = list(args)

    def one(match: re.Match[str]) -> str:
        verb = match.group(1)
        if verb == "%":
            return "%"
        value = values.pop(0) if values else ""
        if verb == "d":
            return str(int(value))
        if verb in "fe":
            return f"{float(value):.6f}" if verb == "f" else f"{float(value):e}"
        if verb in "xX":
            text = format(int(value), "x") if isinstance(value, int) else bytes(
                str(value), "utf-8").hex()
            return text.upper() if verb == "X" else text
        if verb == "o":
            return format(int(value), "o")
        if verb == "b":
            return format(int(value), "b")
        if isinstance(value, celtypes.BoolType):
            return "true" if value else "false"
        return str(value)

    return _s(_VERB.sub(one, str(template)))


def _sorted(items: Any) -> Any:
    values = list(items)
    return _b(all(a <= b for a, b in itertools.pairwise(values)))


FUNCTIONS: dict[str, _Fn] = {
    "isIP": _is_ip,
    "isCIDR": _is_cidr,
    "isURL": _is_url,
    "isQuantity": _is_quantity,
    "lowerAscii": lambda s: _s(str(s).lower()),
    "upperAscii": lambda s: _s(str(s).upper()),
    "trim": lambda s: _s(str(s).strip()),
    "charAt": lambda s, i: _s(str(s)[int(i)] if int(i) < len(str(s)) else ""),
    "split": _split,
    "join": _join,
    "replace": _replace,
    "substring": _substring,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "format": _format,
    "isSorted": _sorted,
    "sum": lambda items: sum(items[1:], items[0]) if len(items) else celtypes.IntType(0),
    "min": lambda items: min(items),
    "max": lambda items: max(items),
}
