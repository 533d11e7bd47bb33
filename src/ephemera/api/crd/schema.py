"""What a CRD version's structural schema (`openAPIV3Schema`) does to a custom resource.

- `validate(obj, schema, old)`: the schema's checks with kube-openapi's messages as the
  apiserver reports them (`spec.replicas: Invalid value: "string": spec.replicas in body
  must be of type integer: "string"`, `Required value`, `Unsupported value`, bounds, lengths,
  patterns, item and property counts), the `x-kubernetes-list-type` invariants (`set` and
  `map` items unique), then the CEL rules (`ephemera.api.crd.cel`), which are not run when
  a value has the wrong type, as upstream does not run them then; a node's rules run before
  its children's, every evaluation limited to upstream's per-call cost and all of them to
  the object's runtime cost budget (`celcost`, counted by `celmeter`), with upstream's
  messages when either runs out;
- `default(obj, schema)`: structural defaulting (a missing property with a `default` gets a
  copy of it; a null that is not `nullable` is dropped, then defaulted);
- `definition(schema, group, version, kind)`: the OpenAPI v2 definition the version is
  served as (and pruned with: unknown fields are the fields this definition does not know,
  `x-kubernetes-preserve-unknown-fields` keeps them), with `apiVersion`, `kind` and
  `metadata` (ObjectMeta) added at the root and in `x-kubernetes-embedded-resource` nodes.

`metadata` at the root is ObjectMeta's business (`ephemera.api.validation`), not the
schema's.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from typing import Any

from ephemera.api import field
from ephemera.api.crd import cel
from ephemera.api.crd.celcost import RUNTIME_CEL_COST_BUDGET
from ephemera.api.field import FieldError, Path
from ephemera.api.schema import OBJECT_META
from ephemera.api.services import service_name_errors
from ephemera.api.validation import path_segment_name, validate_object_meta

# upstream's `MaxEvaluatedMessageExpressionSizeBytes`: a longer evaluated message is not used
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
NOT_CHECKED = ("some validation rules were not checked because the object was invalid; "
               "correct the existing errors to complete validation")
# upstream's `hasBlockingErr`: after one of these schema errors the object does not have the
# shape its CEL rules were written for, so they are not run (NOT_CHECKED is said instead).
BLOCKING_ERRORS = frozenset({"NotSupported", "Required", "TooLong", "TooMany", "TypeInvalid"})
# How Go prints a nil *field.Path: upstream reports NOT_CHECKED and the errors of the root's
# rules at no path (`field.Invalid(nil, ...)`), which reads "<nil>: Invalid value: ..." and is
# the cause's `field`.
NIL_PATH = "<nil>"

Schema = Mapping[str, Any]


def json_type(value: Any) -> str:
    """kube-openapi's name of a value's JSON type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(value: Any, want: str) -> bool:
    got = json_type(value)
    if want == "number":
        return got in ("integer", "number")
    return got == want


@lru_cache(maxsize=1024)
def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return re.compile(text)
    except re.error:
        return None


def _format_error(value: str, fmt: str) -> bool:
    """True when `value` is not of the string `fmt` (the formats kube-openapi checks that
    CRDs use most; others are accepted as upstream accepts unknown formats)."""
    if fmt == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return True
        return "T" not in value and " " not in value
    if fmt == "date":
        return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is None
    if fmt == "uuid":
        return re.fullmatch(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?"
                            r"[0-9a-f]{12}", value) is None
    if fmt == "byte":
        return re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", value) is None or len(value) % 4 != 0
    return False


def _num(value: float) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _Walk:
    """One validation: schema errors, then (when none blocks them: `BLOCKING_ERRORS`) CEL
    errors."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.rule_errors: list[FieldError] = []
        self.unchecked: list[str] = []  # warnings: rules calling a function CEL lacks
        self.blocking = False
        # upstream's runtime cost budget of all the rules of one object; below 0: spent,
        # no further rule runs
        self.budget = RUNTIME_CEL_COST_BUDGET

    def type_error(self, path: Path, value: Any, want: str) -> None:
        got = json_type(value)
        self.blocking = True
        self.errors.append(FieldError("TypeInvalid", str(path), f"{path} in body must be of "
                                      f"type {want}: {_q(got)}", got))

    def check(self, value: Any, s: Schema, path: Path, old: Any, has_old: bool) -> None:
        if value is None:
            if s.get("nullable"):
                return
            if s.get("type"):
                self.type_error(path, value, s["type"])
            return
        if s.get("x-kubernetes-int-or-string"):
            if json_type(value) not in ("integer", "string"):
                self.type_error(path, value, "integer,string")  # kube-openapi's wording
                return
        elif s.get("type") and not _type_ok(value, s["type"]):
            self.type_error(path, value, s["type"])
            return
        self._values(value, s, path)
        rules = s.get("x-kubernetes-validations")
        if rules:  # a node's rules before its children's, as upstream runs them
            self._rules(value, rules, s, path, old, has_old)
        if isinstance(value, dict):
            self._object(value, s, path, old if isinstance(old, dict) else None, has_old)
        elif isinstance(value, list):
            self._array(value, s, path, old if isinstance(old, list) else None, has_old)
        for i, sub in enumerate(s.get("allOf") or ()):
            self._sub(value, sub, path, f"allOf[{i}]")
        self._combinators(value, s, path)

    def _sub(self, value: Any, s: Schema, path: Path, _where: str) -> None:
        self._values(value, s, path)

    def _combinators(self, value: Any, s: Schema, path: Path) -> None:
        any_of = s.get("anyOf")
        if any_of and not s.get("x-kubernetes-int-or-string") and not any(
                _matches(value, sub) for sub in any_of):
            self.errors.append(field.invalid(path, value, "must validate at least one schema "
                                                          "(anyOf)"))
        one_of = s.get("oneOf")
        if one_of and sum(1 for sub in one_of if _matches(value, sub)) != 1:
            self.errors.append(field.invalid(path, value, "must validate one and only one "
                                                          "schema (oneOf)"))
        not_ = s.get("not")
        if isinstance(not_, Mapping) and _matches(value, not_):
            self.errors.append(field.invalid(path, value, "must not validate the schema "
                                                          "(not)"))

    def _values(self, value: Any, s: Schema, path: Path) -> None:
        enum = s.get("enum")
        if enum is not None and value not in enum:
            self.errors.append(field.not_supported(
                path, value, [v if isinstance(v, str) else str(v) for v in enum]))
        if json_type(value) in ("integer", "number") and not isinstance(value, bool):
            self._number(value, s, path)
        if isinstance(value, str):
            self._string(value, s, path)

    def _number(self, value: float, s: Schema, path: Path) -> None:
        shown = _num(value)
        maximum = s.get("maximum")
        if maximum is not None:
            if s.get("exclusiveMaximum") and value >= maximum:
                self.errors.append(field.invalid(
                    path, shown, f"{path} in body should be less than {_num(maximum)}"))
            elif value > maximum:
                self.errors.append(field.invalid(
                    path, shown, f"{path} in body should be less than or equal to "
                                 f"{_num(maximum)}"))
        minimum = s.get("minimum")
        if minimum is not None:
            if s.get("exclusiveMinimum") and value <= minimum:
                self.errors.append(field.invalid(
                    path, shown, f"{path} in body should be greater than {_num(minimum)}"))
            elif value < minimum:
                self.errors.append(field.invalid(
                    path, shown, f"{path} in body should be greater than or equal to "
                                 f"{_num(minimum)}"))
        multiple = s.get("multipleOf")
        if multiple:
            q = value / multiple
            if not math.isclose(q, round(q)):
                self.errors.append(field.invalid(
                    path, shown, f"{path} in body should be a multiple of {_num(multiple)}"))

    def _string(self, value: str, s: Schema, path: Path) -> None:
        max_length = s.get("maxLength")
        if max_length is not None and len(value) > max_length:
            self.errors.append(field.too_long(path, max_length))
        min_length = s.get("minLength")
        if min_length is not None and len(value) < min_length:
            self.errors.append(field.invalid(
                path, value, f"{path} in body should be at least {min_length} chars long"))
        pattern = s.get("pattern")
        if pattern is not None:
            compiled = _pattern(pattern)
            if compiled is not None and compiled.search(value) is None:
                self.errors.append(field.invalid(
                    path, value, f"{path} in body should match '{pattern}'"))
        fmt = s.get("format")
        if fmt and _format_error(value, fmt):
            self.errors.append(field.invalid(
                path, value, f"{path} in body must be of type {fmt}: {_q(value)}"))

    def _object(self, value: dict[str, Any], s: Schema, path: Path,
                old: dict[str, Any] | None, has_old: bool) -> None:
        props: Mapping[str, Any] = s.get("properties") or {}
        if s.get("x-kubernetes-embedded-resource"):
            self.errors.extend(_embedded_resource_errors(value, path))
        for name in s.get("required") or ():
            if name not in value:
                self.errors.append(field.required(path.child(name)))
        max_props = s.get("maxProperties")
        if max_props is not None and len(value) > max_props:
            self.errors.append(FieldError("TooMany", str(path),
                                          f"must have at most {max_props} items", len(value)))
        min_props = s.get("minProperties")
        if min_props is not None and len(value) < min_props:
            self.errors.append(field.invalid(
                path, len(value), f"{path} in body should have at least {min_props} "
                                  "properties"))
        extra = s.get("additionalProperties")
        for key, sub in value.items():
            if path == Path() and key == "metadata":
                continue  # ObjectMeta's
            node = props.get(key)
            if node is None and isinstance(extra, Mapping):
                node = extra
                child = path.key(key)
            else:
                child = path.child(key)
            if node is None:
                continue
            self.check(sub, node, child, old.get(key) if old is not None else None,
                       has_old and old is not None and key in old)

    def _array(self, value: list[Any], s: Schema, path: Path, old: list[Any] | None,
               has_old: bool) -> None:
        max_items = s.get("maxItems")
        if max_items is not None and len(value) > max_items:
            self.errors.append(FieldError("TooMany", str(path),
                                          f"must have at most {max_items} items", len(value)))
        min_items = s.get("minItems")
        if min_items is not None and len(value) < min_items:
            self.errors.append(field.invalid(
                path, len(value), f"{path} in body should have at least {min_items} items"))
        items = s.get("items")
        list_type = s.get("x-kubernetes-list-type")
        keys = s.get("x-kubernetes-list-map-keys") or ()
        old_by_key: dict[Any, Any] = {}
        if list_type == "map" and old is not None:
            for item in old:
                if isinstance(item, dict):
                    old_by_key[_map_key(item, keys)] = item
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                old_item, has = None, False
                if list_type == "map" and isinstance(item, dict):
                    k = _map_key(item, keys)
                    has = k in old_by_key
                    old_item = old_by_key.get(k)
                self.check(item, items, path.index(i), old_item, has_old and has)
        if list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    self.errors.append(field.duplicate(path.index(i), item))
                else:
                    seen.append(item)
        elif list_type == "map":
            seen_keys: list[Any] = []
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                k = _map_key(item, keys)
                if k in seen_keys:
                    self.errors.append(field.duplicate(
                        path.index(i), {key: item.get(key) for key in keys if key in item}))
                else:
                    seen_keys.append(k)

    def _rules(self, value: Any, rules: Any, s: Schema, path: Path, old: Any,
               has_old: bool) -> None:
        """The node's rules, each charged to the object's cost budget as upstream's
        `validateExpressions` charges it, with its messages when the budget or a call's
        limit runs out (then no further rule runs)."""
        if self.budget < 0:
            return
        type_ = s.get("type") or "object"
        if self.budget == 0:
            self._out_of_budget(path, type_)
            return
        for rule in rules:
            if not isinstance(rule, Mapping) or not isinstance(rule.get("rule"), str):
                continue
            try:
                compiled = cel.compile_rule(rule["rule"])
            except cel.CompileError as err:
                self.rule_errors.append(field.invalid(path, rule["rule"],
                                                      f"compilation failed: {err}"))
                continue
            if compiled.transition and not has_old:
                continue
            try:
                ok, cost = cel.evaluate(compiled, value, old, has_old)
            except cel.CallCostExceeded as over:
                if not self._charge(over.cost, path, type_):
                    return
                self.budget = -1
                self.rule_errors.append(field.invalid(path, type_, (
                    f"'{over}': no further validation rules will be run due to call cost "
                    f"exceeds limit for rule: {_rule_error_string(rule)}")))
                return
            except (cel.Unsupported, cel.TooDeep) as err:
                where = f"{path}: " if str(path) else ""
                why = str(err) if isinstance(err, cel.TooDeep) else \
                    f"ephemera's CEL has no function {_q(str(err))}"
                self.unchecked.append(
                    f"{where}x-kubernetes-validations rule {_q(rule['rule'])} was not "
                    f"checked: {why}")
                continue
            except cel.EvalError as err:
                if not self._charge(err.cost, path, type_):
                    return
                self.rule_errors.append(field.invalid(path, type_, _eval_failure(err, rule)))
                continue
            if not self._charge(cost, path, type_):
                return
            if ok is True:
                continue
            failure = self._rule_failure(rule, value, old, has_old, s, path)
            if failure is not None:
                self.rule_errors.append(failure)
            if self.budget < 0:
                return

    def _charge(self, cost: int, path: Path, type_: str, what: str = "validation") -> bool:
        """`cost` taken from the budget; False (and upstream's error) when it does not fit."""
        if cost > self.budget:
            self._out_of_budget(path, type_, what)
            return False
        self.budget -= cost
        return True

    def _out_of_budget(self, path: Path, type_: str, what: str = "validation") -> None:
        self.budget = -1
        self.rule_errors.append(field.invalid(path, type_, (
            f"{what} failed due to running out of cost budget, no further validation rules "
            f"will be run")))

    def _rule_failure(self, rule: Mapping[str, Any], value: Any, old: Any, has_old: bool,
                      s: Schema, path: Path) -> FieldError | None:
        """The error of a rule that evaluated to false (or not to true), its message from
        `messageExpression` where that evaluates within the budget; None when the message
        expression ran out of the budget (its own error is recorded and no rule runs
        further)."""
        type_ = s.get("type") or "object"
        message = _rule_message_or_default(rule)
        where = path
        field_path = rule.get("fieldPath")
        if isinstance(field_path, str) and field_path.startswith("."):
            where = Path._raw(f"{path}{field_path}" if str(path) else field_path[1:])
        expression = rule.get("messageExpression")
        if isinstance(expression, str) and expression:
            try:
                text, cost = cel.evaluate(cel.compile_rule(expression), value, old, has_old)
            except cel.CallCostExceeded as over:
                if not self._charge(over.cost, where, type_, "messageExpression evaluation"):
                    return None
                self.budget = -1
                self.rule_errors.append(field.invalid(where, type_, (
                    "no further validation rules will be run due to call cost exceeds "
                    f"limit for messageExpression: {_q(expression)}")))
                return None
            except cel.EvalError as err:
                cost, text = err.cost, None
            except cel.CompileError:
                cost, text = 0, None
            if not self._charge(cost, where, type_, "messageExpression evaluation"):
                return None
            text = text.strip() if isinstance(text, str) else ""
            if text and "\n" not in text and len(text.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES:
                message = text
        kind = cel.REASONS.get(str(rule.get("reason") or "FieldValueInvalid"), "Invalid")
        if kind in ("Invalid", "Duplicate"):
            return FieldError(kind, str(where), message, type_)
        return FieldError(kind, str(where), message)


def _embedded_resource_errors(value: dict[str, Any], path: Path) -> list[FieldError]:
    """upstream's `validateEmbeddedResource`: apiVersion and kind set and well formed, and
    the metadata as ObjectMeta (a missing name is allowed)."""
    errs: list[FieldError] = []
    for key in ("apiVersion", "kind"):
        if key not in value:
            errs.append(field.required(path.child(key), "must not be empty"))
    for key, item in value.items():
        if key in ("apiVersion", "kind"):
            if not isinstance(item, str):
                errs.append(field.invalid(path.child(key), item, "must be a string"))
            elif not item:
                errs.append(field.invalid(path.child(key), item, "must not be empty"))
            elif key == "apiVersion" and item.count("/") > 1:
                errs.append(field.invalid(path.child(key), item,
                                          f"unexpected GroupVersion string: {item}"))
            elif key == "kind" and (msgs := dns1035_label_errors(item.lower())):
                errs.append(field.invalid(path.child(key), item,
                                          "may have mixed case, but should otherwise match: "
                                          + ",".join(msgs)))
        elif key == "metadata" and isinstance(item, dict):
            md = dict(item)
            md.setdefault("name", "fakename")  # upstream's: a name is not required here
            if not md["name"]:
                md["name"] = "fakename"
            errs.extend(validate_object_meta(md, namespaced=bool(md.get("namespace")),
                                             name_fn=path_segment_name,
                                             path=path.child("metadata"),
                                             kube_finalizers=False))
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    """`IsDNS1035Label`."""
    return service_name_errors(value, False)


def _rule_message_or_default(rule: Mapping[str, Any]) -> str:
    """upstream's `ruleMessageOrDefault`: the rule's message, else `failed rule: RULE`
    (both trimmed)."""
    message = rule.get("message")
    if isinstance(message, str) and message:
        return message.strip()
    return f"failed rule: {_rule_error_string(rule)}"


def _eval_failure(err: cel.EvalError, rule: Mapping[str, Any]) -> str:
    """upstream's detail of a rule that failed to evaluate."""
    if str(err).startswith(cel.NO_SUCH_OVERLOAD):
        return (f"'{err}': call arguments did not match a supported operator, function or "
                f"macro signature for rule: {_rule_error_string(rule)}")
    return f"{err} evaluating rule: {_rule_error_string(rule)}"


def _rule_error_string(rule: Mapping[str, Any]) -> str:
    """upstream's `ruleErrorString`: the rule's message, else its text, trimmed."""
    message = rule.get("message")
    if isinstance(message, str) and message:
        return message.strip()
    return str(rule["rule"]).strip()


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _map_key(item: Mapping[str, Any], keys: Any) -> tuple[Any, ...]:
    return tuple(repr(item.get(k)) for k in keys)


def _matches(value: Any, s: Any) -> bool:
    if not isinstance(s, Mapping):
        return True
    walk = _Walk()
    walk.check(value, s, Path(), None, False)
    return not walk.errors


def validate(obj: Any, schema: Schema, old: Any = None) -> list[FieldError]:
    """The schema's errors of `obj` (an update's `old` for transition rules), then its CEL
    rules' errors; CEL is skipped with upstream's note after a blocking schema error (a wrong
    type, a missing required field, a value outside its enum, too long, too many)."""
    return validate_with_warnings(obj, schema, old)[0]


def validate_with_warnings(obj: Any, schema: Schema, old: Any = None
                           ) -> tuple[list[FieldError], list[str]]:
    """`validate`'s errors, and the warnings of the rules that were not checked (they call a
    function this CEL has not)."""
    walk = _Walk()
    walk.check(obj, schema, Path(), old, old is not None)
    if walk.blocking or any(error.type in BLOCKING_ERRORS for error in walk.errors):
        if has_rules(schema):
            return [*walk.errors, FieldError("Invalid", NIL_PATH, NOT_CHECKED, None)], []
        return walk.errors, []
    return [*walk.errors, *map(_root_rule_error, walk.rule_errors)], walk.unchecked


def _root_rule_error(error: FieldError) -> FieldError:
    """A rule error at the root of the schema as upstream reports it: its CEL validator
    starts from a nil path, so a root rule's error (and a budget error met there) is at
    NIL_PATH (`<nil>: Invalid value: "object": ...`), not at the empty path."""
    return replace(error, field=NIL_PATH) if not error.field else error


def may_leave_rules_unchecked(s: Any) -> bool:
    """Whether a schema has a rule that may call a function (or name a variable) this CEL
    has not (`cel.may_be_unsupported`); without one, no validation can warn of an unchecked
    rule, so the warning pass need not evaluate the rules again."""
    if isinstance(s, Mapping):
        for rule in s.get("x-kubernetes-validations") or ():
            if isinstance(rule, Mapping) and isinstance(rule.get("rule"), str) \
                    and cel.may_be_unsupported(rule["rule"]):
                return True
        return any(may_leave_rules_unchecked(v) for v in s.values())
    if isinstance(s, list):
        return any(may_leave_rules_unchecked(v) for v in s)
    return False


def has_rules(s: Any) -> bool:
    """Whether a schema has x-kubernetes-validations anywhere."""
    if isinstance(s, Mapping):
        if s.get("x-kubernetes-validations"):
            return True
        return any(has_rules(v) for v in s.values())
    if isinstance(s, list):
        return any(has_rules(v) for v in s)
    return False


# --- defaulting ------------------------------------------------------------------------------


def default(value: Any, s: Schema) -> None:
    """Structural defaulting of `value` in place."""
    if isinstance(value, dict):
        props: Mapping[str, Any] = s.get("properties") or {}
        for name, sub in props.items():
            if not isinstance(sub, Mapping):
                continue
            if name in value and value[name] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[name] = copy.deepcopy(sub["default"])
                else:
                    del value[name]
            elif name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                default(value[name], sub)
        extra = s.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, sub_value in value.items():
                if key not in props:
                    default(sub_value, extra)
    elif isinstance(value, list):
        items = s.get("items")
        if isinstance(items, Mapping):
            for item in value:
                default(item, items)


# --- the served definition ---------------------------------------------------------------------

_DROPPED = ("default", "x-kubernetes-validations")


def _served(node: Any, root: bool = False) -> Any:
    if isinstance(node, list):
        return [_served(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _served(v) for k, v in value.items()} if isinstance(
                value, Mapping) else value
        elif key in _DROPPED:
            continue
        else:
            out[key] = _served(value)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        out.pop("type", None)
    if root or out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string", "description": _API_VERSION_DOC})
        props.setdefault("kind", {"type": "string", "description": _KIND_DOC})
        props["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
        out.setdefault("type", "object")
    return out


_API_VERSION_DOC = ("APIVersion defines the versioned schema of this representation of an "
                    "object.")
_KIND_DOC = "Kind is a string value representing the REST resource this object represents."


def definition(schema: Schema | None, group: str, version: str, kind: str) -> dict[str, Any]:
    """The OpenAPI v2 definition of a custom resource served with `schema` (None: any
    content, as a CRD version without a schema)."""
    node: dict[str, Any] = _served(schema or {"type": "object",
                                              "x-kubernetes-preserve-unknown-fields": True},
                                   root=True)
    node["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind,
                                                "version": version}]
    return node


def list_definition(item_definition: str, group: str, version: str, list_kind: str
                    ) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{list_kind} is a list of {item_definition.rsplit('.', 1)[-1]}",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
            "items": {"type": "array", "items": {"$ref": f"#/definitions/{item_definition}"}},
            "kind": {"type": "string", "description": _KIND_DOC},
            "metadata": {"$ref": f"#/definitions/{LIST_META}"},
        },
        "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind,
                                             "version": version}],
    }


def definition_name(group: str, version: str, kind: str) -> str:
    """Upstream's name of a custom resource's definition: the group reversed, the version,
    the kind (`com.example.stable.v1.CronTab`)."""
    return ".".join([*reversed(group.split(".")), version, kind])
