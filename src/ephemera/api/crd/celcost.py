"""A lower bound of upstream's static cost estimate of an `x-kubernetes-validations` rule.

Upstream (apiextensions validation, cel-go's cost estimator) refuses a CRD whose rule's
estimated cost, times the most times the rule's schema node can occur in one object (its
cardinality), exceeds `StaticEstimatedCostLimit` (10,000,000), with the factor by which it
does. cel-python has no cost estimator, and a faithful port of cel-go's is out of reach, so
ephemera computes a *lower bound* of upstream's estimate and refuses only a rule whose bound
already exceeds the budget a hundredfold: there upstream's message is fixed ("more than
100x"), and upstream refuses it too. A rule below that is accepted (the CRD's create gets a
Warning, see `definition.cel_cost_warnings`); at run time upstream's per-call limit and
per-object budget (below) apply to the cost `celmeter` counts.

The bound counts what cel-go charges at least: 1 per identifier and field selection, and a
comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) or a list's `in` once per
element of its range, the range's size being the schema's `maxItems`/`maxProperties` or, for
an unbounded one, the elements of the smallest size that fit in a 3 MiB request, as upstream
estimates them (with minimum sizes never below upstream's, so never more elements). Ranges
whose schema is not known from `self`, `oldSelf` or a comprehension's variable count once.
A rule nested too deeply for the (recursive) walk has no bound and is not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_REQUEST_BYTES = 3 * 1024 * 1024
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
# upstream's runtime limits (k8s.io/apiserver/pkg/apis/cel): one evaluation of a rule or
# messageExpression, and all the rules' evaluations of one object validation
PER_CALL_LIMIT = 1_000_000
RUNTIME_CEL_COST_BUDGET = 10_000_000
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# never below upstream's minimum JSON size of a formatted string (duration, date, date-time)
FORMATTED_STRING_MIN = 40

COST_MESSAGE = ("estimated rule cost exceeds budget by factor of more than 100x (try "
                "simplifying the rule, or adding maxItems, maxProperties, and maxLength where "
                "arrays, maps, and strings are declared)")

Schema = Mapping[str, Any]


def min_size(schema: Schema | None) -> int:
    """The smallest JSON a value of `schema` serializes to, with its comma: at least
    upstream's estimate."""
    if not isinstance(schema, Mapping):
        return 2
    type_ = schema.get("type")
    if type_ == "boolean":
        return 5
    if type_ in ("number", "integer"):
        return 2
    if type_ == "string":
        return FORMATTED_STRING_MIN if schema.get("format") in (
            "duration", "date", "date-time") else 3
    if type_ == "array":
        return 3
    if type_ == "object":
        props = schema.get("properties") or {}
        size = 3
        for name in schema.get("required") or []:
            size += len(str(name)) + 4 + min_size(props.get(name))
        return size
    return 2


def max_elements(schema: Schema | None) -> int:
    """How many elements (items, or map entries) a value of `schema` can have; 1 for what
    is not a list or a map (or not known)."""
    if not isinstance(schema, Mapping):
        return 1
    if schema.get("type") == "array":
        if isinstance(schema.get("maxItems"), int):
            return int(schema["maxItems"])
        return (MAX_REQUEST_BYTES - 2) // (min_size(schema.get("items")) + 1)
    extra = schema.get("additionalProperties")
    if schema.get("type") == "object" and isinstance(extra, Mapping):
        if isinstance(schema.get("maxProperties"), int):
            return int(schema["maxProperties"])
        return (MAX_REQUEST_BYTES - 2) // (min_size(extra) + 6)
    return 1


def child_cardinality(parent: Schema, cardinality: int | None) -> int | None:
    """The cardinality of `child` (an item or a map value of `parent`); None: under an
    unbounded list or map (then `cardinality_of` estimates it from the node's size)."""
    bounded = "maxItems" if parent.get("type") == "array" else "maxProperties"
    if cardinality is None or not isinstance(parent.get(bounded), int):
        return None
    return cardinality * int(parent[bounded])


def cardinality_of(node: Schema, cardinality: int | None) -> int:
    """How many times `node` can occur in one object, as upstream bounds it."""
    if cardinality is not None:
        return cardinality
    return MAX_REQUEST_BYTES // (min_size(node) + 1)


def _element(schema: Schema | None) -> Schema | None:
    """The schema of what a comprehension over `schema` binds its variable to."""
    if not isinstance(schema, Mapping):
        return None
    if schema.get("type") == "array":
        items = schema.get("items")
        return items if isinstance(items, Mapping) else None
    return {"type": "string"} if schema.get("type") == "object" else None


def _field(schema: Schema | None, name: str) -> Schema | None:
    if not isinstance(schema, Mapping):
        return None
    prop = (schema.get("properties") or {}).get(name)
    if isinstance(prop, Mapping):
        return prop
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _children(tree: Any) -> list[Any]:
    return list(getattr(tree, "children", []))


def _name(tree: Any) -> str:
    return str(getattr(tree, "data", ""))


def comprehension_variable(tree: Any) -> str | None:
    """The variable's name of a comprehension whose first argument is `tree` (celpy's
    parse tree of the macro's first argument), if it is a plain identifier."""
    kids = _children(tree)
    while len(kids) == 1 and hasattr(kids[0], "data"):
        if _name(kids[0]) == "ident":
            inner = _children(kids[0])
            return str(inner[0]) if inner else None
        kids = _children(kids[0])
    return None


class _Bound:
    """The lower bound over one rule's parse tree (celpy's lark tree)."""

    def __init__(self, node: Schema) -> None:
        self.node = node

    def shape(self, tree: Any, scope: Mapping[str, Schema | None]) -> Schema | None:
        """The schema of the value `tree` evaluates to, where it follows from `self`,
        `oldSelf`, a comprehension variable and field selections; else None."""
        kids = _children(tree)
        name = _name(tree)
        if name == "ident" and kids:
            ident = str(kids[0])
            if ident in scope:
                return scope[ident]
            return self.node if ident in ("self", "oldSelf") else None
        if name == "member_dot" and len(kids) == 2:
            return _field(self.shape(kids[0], scope), str(kids[1]))
        if name == "member_index" and kids:
            indexed = self.shape(kids[0], scope)
            if isinstance(indexed, Mapping) and indexed.get("type") == "array":
                return _element(indexed)
            return _field(indexed, "")  # a map's value
        if len(kids) == 1:  # a wrapper of one expression
            return self.shape(kids[0], scope)
        return None

    def cost(self, tree: Any, scope: Mapping[str, Schema | None]) -> int:
        kids = _children(tree)
        name = _name(tree)
        if name == "ident":
            return 1
        if name == "member_dot" and kids:
            return 1 + self.cost(kids[0], scope)
        if name == "member_dot_arg" and len(kids) == 3 and str(kids[1]) in MACROS:
            target, args = kids[0], _children(kids[2])
            if len(args) == 2:
                variable = comprehension_variable(args[0])
                if variable is not None:
                    shape = self.shape(target, scope)
                    inner = {**scope, variable: _element(shape)}
                    return self.cost(target, scope) + max_elements(shape) * max(
                        1, self.cost(args[1], inner))
        if name == "relation" and len(kids) == 2 and _name(kids[0]) == "relation_in":
            rhs = self.shape(kids[1], scope)
            per_element = max_elements(rhs) if (rhs or {}).get("type") == "array" else 0
            return self.cost(kids[0], scope) + self.cost(kids[1], scope) + per_element
        return sum(self.cost(kid, scope) for kid in kids if hasattr(kid, "data"))


def exceeds_hundredfold(tree: Any, node: Schema, cardinality: int) -> bool:
    """The rule parsed as `tree` on schema `node` (which occurs up to `cardinality` times)
    costs, by the lower bound, more than 100 times upstream's per-expression limit."""
    try:
        cost = _Bound(node).cost(tree, {})
    except RecursionError:  # nested deeper than this walk goes: no bound, so not refused
        return False
    return cost * max(cardinality, 1) > 100 * STATIC_ESTIMATED_COST_LIMIT
