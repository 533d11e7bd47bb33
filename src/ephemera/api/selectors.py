"""Label and field selectors, parsed and matched as apimachinery's `labels.Parse` and
`fields.ParseSelector` do, plus the selectable fields of each kind (upstream's
`ToSelectableFields` / field label conversion) with upstream's messages
(`field label not supported: X`).

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`,
`k<1`, comma-separated (AND). Field selectors: `f=v`, `f==v`, `f!=v`, comma-separated, values
escaped with backslashes. Duplicated terms are allowed (kr8s sends
`metadata.name=p1,metadata.name=p1`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.api.meta import label_value_errors, qualified_name_errors


class SelectorError(ValueError):
    """A selector that does not parse, or names a field the kind cannot select on; the
    message is upstream's and the apiserver answers it as a 400 BadRequest."""


# --- label selectors ---------------------------------------------------------------------

EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "in", "notin", "exists", "!"
GREATER_THAN, LESS_THAN = "gt", "lt"
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (EQUALS, DOUBLE_EQUALS, IN):
            return self.key in labels and labels[self.key] in self.values
        if op in (NOT_EQUALS, NOT_IN):
            return self.key not in labels or labels[self.key] not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if self.key not in labels:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if op == GREATER_THAN else have < want

    def __str__(self) -> str:
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({','.join(self.values)})"
        sym = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{sym}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_LabelParser(text).parse()))


# Tokens of upstream's label selector lexer.
_ID, _EOS, _COMMA, _OPEN, _CLOSE, _NOT = "id", "eos", ",", "(", ")", "!"
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_SPECIAL = set("=!(),><")


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.tokens = self._lex(text)
        self.pos = 0

    @staticmethod
    def _lex(text: str) -> list[tuple[str, str]]:
        tokens: list[tuple[str, str]] = []
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch.isspace():
                i += 1
                continue
            if ch in _SPECIAL:
                for sym in _SYMBOLS:
                    if text.startswith(sym, i):
                        tokens.append((sym, sym))
                        i += len(sym)
                        break
                continue
            start = i
            while i < n and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            tokens.append((_ID, text[start:i]))
        tokens.append((_EOS, ""))
        return tokens

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def _next(self) -> tuple[str, str]:
        tok = self.tokens[self.pos]
        if tok[0] != _EOS:
            self.pos += 1
        return tok

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self._peek()
            if tok in (_ID, _NOT):
                try:
                    requirements.append(self._requirement())
                except SelectorError as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                tok, lit = self._next()
                if tok == _EOS:
                    return requirements
                if tok == _COMMA:
                    tok2, lit2 = self._peek()
                    if tok2 not in (_ID, _NOT):
                        raise SelectorError(f"found '{lit2}', expected: identifier after ','")
                    continue
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            if tok == _EOS:
                return requirements
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        operator = ""
        tok, lit = self._next()
        if tok == _NOT:
            operator = DOES_NOT_EXIST
            tok, lit = self._next()
        if tok != _ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        errs = qualified_name_errors(key)
        if errs:
            raise SelectorError(f'key: Invalid value: "{key}": ' + "; ".join(errs))
        if self._peek()[0] in (_EOS, _COMMA):
            return Requirement(key, operator or EXISTS)
        if operator == DOES_NOT_EXIST:
            raise SelectorError(f"found '{self._peek()[1]}', expected: ',' or 'end of string'")
        tok, lit = self._next()
        ops = {"=": EQUALS, "==": DOUBLE_EQUALS, "!=": NOT_EQUALS, ">": GREATER_THAN,
               "<": LESS_THAN}
        if tok in ops:
            operator = ops[tok]
            values = self._exact_value()
        elif tok == _ID and lit in (IN, NOT_IN):
            operator = lit
            values = self._values()
        else:
            raise SelectorError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        return _new_requirement(key, operator, values)

    def _exact_value(self) -> list[str]:
        tok, lit = self._peek()
        if tok in (_EOS, _COMMA):
            return [""]
        tok, lit = self._next()
        if tok == _ID:
            return [lit]
        raise SelectorError(f"found '{lit}', expected: identifier")

    def _values(self) -> list[str]:
        tok, lit = self._next()
        if tok != _OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self._peek()
        if tok == _CLOSE:
            self._next()
            return [""]
        if tok not in (_ID, _COMMA):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values: list[str] = []
        expect_value = True
        while True:
            tok, lit = self._peek()
            if tok == _ID:
                if not expect_value:
                    raise SelectorError(f"found '{lit}', expected: ',' or ')'")
                values.append(lit)
                self._next()
                expect_value = False
            elif tok == _COMMA:
                if expect_value:
                    values.append("")
                self._next()
                expect_value = True
            elif tok == _CLOSE:
                if expect_value:
                    values.append("")
                self._next()
                return sorted(set(values))
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")


def _new_requirement(key: str, operator: str, values: list[str]) -> Requirement:
    if operator in (IN, NOT_IN) and not values:
        raise SelectorError("values: Invalid value: []: for 'in', 'notin' operators, "
                            "values set can't be empty")
    if operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
        raise SelectorError("values: Invalid value: exact-match compatibility requires one "
                            "single value")
    if operator in (GREATER_THAN, LESS_THAN):
        try:
            int(values[0])
        except ValueError:
            raise SelectorError(f'values[0]: Invalid value: "{values[0]}": for \'Gt\', '
                                "'Lt' operators, the value must be an integer") from None
    else:
        for i, value in enumerate(values):
            errs = label_value_errors(value)
            if errs:
                raise SelectorError(f'values[{i}][{key}]: Invalid value: "{value}": '
                                    + "; ".join(errs))
    return Requirement(key, operator, tuple(values))


# --- field selectors ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    operator: str  # "=" or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        have = fields.get(self.field, "")
        return have == self.value if self.operator == EQUALS else have != self.value


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(t.matches(fields) for t in self.terms)

    def exact(self, field_name: str) -> str | None:
        """The value an `=` term requires of `field_name`, if any (for narrowing a list);
        None when there is none or two terms disagree."""
        found: str | None = None
        for term in self.terms:
            if term.field == field_name and term.operator == EQUALS:
                if found is not None and found != term.value:
                    return None
                found = term.value
        return found

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text:
            return cls()
        terms: list[FieldTerm] = []
        for part in sorted(_split_terms(text)):
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            lhs, op, rhs = split
            terms.append(FieldTerm(lhs, NOT_EQUALS if op == "!=" else EQUALS, _unescape(rhs)))
        return cls(tuple(terms))

    def check_supported(self, kind: str) -> None:
        """Raise `field label not supported: X` for a field `kind` cannot select on."""
        supported = selectable_fields(kind)
        for term in self.terms:
            if term.field not in supported:
                raise SelectorError(f"field label not supported: {term.field}")

    def __str__(self) -> str:
        return ",".join(f"{t.field}{t.operator}{t.value}" for t in self.terms)


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            current.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    escaped = False
    for i, ch in enumerate(term):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape(value: str) -> str:
    """`fields.UnescapeValue`; its errors print the offending rune as Go's `%v` does (a
    number)."""
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise SelectorError(
                    f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise SelectorError(
                f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


# --- the selectable fields of each kind ------------------------------------------------


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


FieldGetter = Callable[[Mapping[str, Any]], str]


def _path(*path: str) -> FieldGetter:
    return lambda obj: _text(_get(obj, *path))


_META: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

_BY_KIND: dict[str, dict[str, FieldGetter]] = {
    "Pod": {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: _text(bool(_get(o, "spec", "hostNetwork"))),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "Event": {
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    "Namespace": {"status.phase": _path("status", "phase")},
    "Node": {"spec.unschedulable": lambda o: _text(bool(_get(o, "spec", "unschedulable")))},
    "Secret": {"type": _path("type")},
}


def set_kind_fields(kind: str, fields: Mapping[str, Sequence[str]] | None) -> None:
    """The selectable fields of a kind known at run time (a custom resource's
    `selectableFields`, by their paths); None forgets the kind."""
    if fields is None:
        _BY_KIND.pop(kind, None)
        return
    _BY_KIND[kind] = {name: _path(*path) for name, path in fields.items()}


def selectable_fields(kind: str) -> frozenset[str]:
    return frozenset(_META) | frozenset(_BY_KIND.get(kind, ()))


def field_values(kind: str, obj: Mapping[str, Any], names: frozenset[str] | None = None
                 ) -> dict[str, str]:
    """The values of the selectable fields of `obj` (only `names` when given)."""
    getters = {**_META, **_BY_KIND.get(kind, {})}
    if names is not None:
        getters = {k: g for k, g in getters.items() if k in names}
    return {name: getter(obj) for name, getter in getters.items()}


@dataclass(frozen=True, slots=True)
class Selection:
    """A label selector and a field selector checked against one kind."""

    kind: str
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    @classmethod
    def parse(cls, kind: str, label_selector: str | None, field_selector: str | None
              ) -> Selection:
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(field_selector)
        fields.check_supported(kind)
        return cls(kind, labels, fields)

    @property
    def empty(self) -> bool:
        return self.labels.empty and self.fields.empty

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if not self.labels.empty:
            meta = obj.get("metadata") or {}
            if not self.labels.matches(meta.get("labels")):
                return False
        if not self.fields.empty:
            names = frozenset(t.field for t in self.fields.terms)
            if not self.fields.matches(field_values(self.kind, obj, names)):
                return False
        return True
