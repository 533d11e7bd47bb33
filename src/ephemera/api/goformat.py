"""How Go prints values into the messages ephemera copies from upstream: `go_quote` is
`strconv.Quote` (what `%q` prints for a string), `go_quote_list` is `%q` of a `[]string`.
The one implementation every message builder uses."""

from __future__ import annotations

from collections.abc import Sequence

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """Go's `strconv.Quote`: printable characters as they are, the usual backslash escapes,
    `\\xNN` below 0x80, `\\uNNNN`/`\\UNNNNNNNN` above; safe in a message and in an HTTP
    header."""
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
