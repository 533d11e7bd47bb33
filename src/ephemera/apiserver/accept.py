"""Parsing of HTTP `Accept` headers into media ranges, for content negotiation of Kubernetes'
parameterised JSON media types (`application/json;as=Table;v=v1;g=meta.k8s.io`,
`application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`).

Ranges keep the client's order; `q` weights reorder them stably, as upstream's negotiation
does (`k8s.io/apimachinery/pkg/runtime/serializer/...` via `goautoneg`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MediaRange:
    type: str  # "application", "*"
    subtype: str  # "json", "*"
    params: dict[str, str] = field(default_factory=dict)
    q: float = 1.0

    @property
    def mime(self) -> str:
        return f"{self.type}/{self.subtype}"

    def matches_json(self) -> bool:
        """True if a JSON body can satisfy this range (ignoring parameters)."""
        return self.type in ("application", "*") and self.subtype in ("json", "*")


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_accept(header: str | None) -> list[MediaRange]:
    """The media ranges of an Accept header, most preferred first; [] for a missing header.

    Ranges with `q=0` are dropped (they mean "not acceptable").
    """
    if not header:
        return []
    ranges: list[tuple[float, int, MediaRange]] = []
    for index, part in enumerate(header.split(",")):
        pieces = [p.strip() for p in part.split(";")]
        mime = pieces[0].lower()
        if not mime:
            continue
        typ, _, sub = mime.partition("/")
        params: dict[str, str] = {}
        q = 1.0
        for piece in pieces[1:]:
            if not piece:
                continue
            key, _, value = piece.partition("=")
            key = key.strip().lower()
            value = _unquote(value)
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 1.0
            else:
                params[key] = value
        if q <= 0:
            continue
        ranges.append((q, index, MediaRange(typ, sub or "*", params, q)))
    ranges.sort(key=lambda item: (-item[0], item[1]))
    return [r for _, _, r in ranges]
