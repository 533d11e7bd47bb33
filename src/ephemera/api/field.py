"""Field paths and field errors, formatted exactly as apimachinery's `field` package does.

`FieldError.message()` is the ErrorBody (`Invalid value: "x": detail`) and `str(err)` is
`<path>: <ErrorBody>`, which is what `Status.details.causes[]` and the aggregate message of a
422 Invalid carry (see reference/k8s-semantics.md section 9.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ephemera.api.goformat import go_quote, go_value

__all__ = ["FieldError", "Path", "aggregate", "duplicate", "forbidden", "go_value",
           "invalid", "not_found", "not_supported", "required", "too_long"]

# ErrorType -> (cause reason, human type name)
_TYPES: dict[str, tuple[str, str]] = {
    "NotFound": ("FieldValueNotFound", "Not found"),
    "Required": ("FieldValueRequired", "Required value"),
    "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
    "Invalid": ("FieldValueInvalid", "Invalid value"),
    "TypeInvalid": ("FieldValueTypeInvalid", "Invalid value"),
    "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
    "Forbidden": ("FieldValueForbidden", "Forbidden"),
    "TooLong": ("FieldValueTooLong", "Too long"),
    "TooMany": ("FieldValueTooMany", "Too many"),
    "Internal": ("InternalError", "Internal error"),
}
# Types whose body shows the bad value.
_SHOWS_VALUE = {"NotFound", "Duplicate", "Invalid", "TypeInvalid", "NotSupported", "TooMany"}

_OMIT = object()


class Path:
    """An immutable field path: `Path("spec").child("containers").index(0).key("cpu")`."""

    __slots__ = ("_text",)

    def __init__(self, *names: str) -> None:
        self._text = ".".join(names)

    @classmethod
    def _raw(cls, text: str) -> Path:
        p = cls()
        p._text = text
        return p

    def child(self, *names: str) -> Path:
        text = self._text
        for n in names:
            text = f"{text}.{n}" if text else n
        return Path._raw(text)

    def index(self, i: int) -> Path:
        return Path._raw(f"{self._text}[{i}]")

    def key(self, k: str) -> Path:
        return Path._raw(f"{self._text}[{k}]")

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Path({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Path) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


@dataclass(frozen=True)
class FieldError:
    type: str  # one of _TYPES
    field: str
    detail: str = ""
    bad_value: Any = _OMIT

    @property
    def reason(self) -> str:
        return _TYPES[self.type][0]

    def message(self) -> str:
        """The ErrorBody: the type name, the value where the type shows it, then the detail."""
        text = _TYPES[self.type][1]
        if self.type in _SHOWS_VALUE and self.bad_value is not _OMIT:
            text = f"{text}: {go_value(self.bad_value)}"
        if self.type == "NotSupported" and self.detail:
            return f"{text}: {self.detail}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.message()}" if self.field else self.message()

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message(), "field": self.field}


def _p(path: Path | str) -> str:
    return str(path)


def invalid(path: Path | str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid", _p(path), detail, value)


def required(path: Path | str, detail: str = "") -> FieldError:
    return FieldError("Required", _p(path), detail)


def duplicate(path: Path | str, value: Any) -> FieldError:
    return FieldError("Duplicate", _p(path), "", value)


def not_found(path: Path | str, value: Any) -> FieldError:
    return FieldError("NotFound", _p(path), "", value)


def forbidden(path: Path | str, detail: str) -> FieldError:
    return FieldError("Forbidden", _p(path), detail)


def too_long(path: Path | str, max_length: int) -> FieldError:
    return FieldError("TooLong", _p(path), f"may not be more than {max_length} bytes")


def not_supported(path: Path | str, value: Any, supported: list[str]) -> FieldError:
    detail = ("supported values: " + ", ".join(go_quote(s) for s in supported)
              if supported else "")
    return FieldError("NotSupported", _p(path), detail, value)


def aggregate(errors: list[FieldError]) -> str:
    """apimachinery's aggregate message: one error as is, several as `[e1, e2]`, deduplicated."""
    seen: list[str] = []
    for e in errors:
        s = str(e)
        if s not in seen:
            seen.append(s)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"
