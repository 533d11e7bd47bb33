"""The runtime cost of a CEL evaluation, counted while cel-python (`celpy`) evaluates, and the
per-call limit that aborts it, as cel-go's cost tracker (`interpreter/runtimecost.go`) counts.

What is charged (cel-go's unit; its figures where ephemera can see the same step):
- 1 per identifier (`self`, `oldSelf`, a comprehension variable), field selection
  (`a.b`, `.a`) and index (`a[i]`); constants cost nothing; `&&`, `||` and `?:` cost nothing
  themselves (only the operands they evaluate); a list literal 10, a map literal 30, a
  message literal 40 (`ListCreateBaseCost`, `MapCreateBaseCost`, `StructCreateBaseCost`).
- a function or operator call 1, except the ones cel-go charges by size (a string's length
  in characters, a list's or map's number of elements; factor 0.1 rounded up):
  `==`, `!=`, `<`, `<=`, `>`, `>=` by the smaller operand; string `+` by both;
  `startsWith`, `endsWith` by the string; `contains` string times substring; `matches`
  (1 + string) x 0.1 times pattern x 0.25; list `in` the list's size. Of Kubernetes' own
  libraries (`cellib`): a string function 1 + its string arguments' length x 0.1, a list
  function 1 + the list's size.
- a comprehension, per element, what cel-go's expansion of the macro adds around the body
  (the accumulator's reads and the loop condition): `all` 3, `exists` 4, `exists_one` 2,
  `map` 12, `filter` 1 (13 for an element kept); plus its body's own cost.

Differences from upstream: cel-python evaluates every element of `all`/`exists` (no
short-circuit), so a rule can cost more here than in cel-go; cel-python's steps are not
cel-go's one for one (e.g. the final read of the accumulator is not charged), so costs agree
roughly, not exactly. The count is aborted (`CostLimitExceeded`) as soon as it passes the
limit, as cel-go's `operation cancelled: actual cost limit exceeded`.

A `Meter` is one evaluation's; the functions find it through a context variable, so
evaluations in several threads do not share one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import lark
from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions

from ephemera.api.crd.cellib import FUNCTIONS

STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRUCT_CREATE_BASE_COST = 40

# cost of a parse-tree node itself (its children are charged as they are visited)
_NODE_COST = {"member_dot": 1, "member_object": STRUCT_CREATE_BASE_COST}
# cost of what `primary` resolves itself, without visiting it
_PRIMARY_COST = {"ident": 1, "dot_ident": 1, "list_lit": LIST_CREATE_BASE_COST,
                 "map_lit": MAP_CREATE_BASE_COST}
# what cel-go's expansion of each macro adds per element, besides the body
_ITERATION_COST = {"all": 3, "exists": 4, "exists_one": 2, "map": 12, "filter": 1}
_FILTER_KEPT_COST = 12
_RELATIONS = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_ge": "_>=_",
              "relation_gt": "_>_", "relation_eq": "_==_", "relation_ne": "_!=_",
              "relation_in": "_in_"}
_FREE = frozenset({"_&&_", "_||_", "_?_:_"})
_COMPARE = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
_STRING_LIB = frozenset({"lowerAscii", "upperAscii", "trim", "split", "join", "replace",
                         "substring", "charAt", "format", "isIP", "isCIDR", "isURL",
                         "isQuantity"})
_LIST_LIB = frozenset({"isSorted", "sum", "min", "max"})


class CostLimitExceeded(BaseException):
    """The evaluation's cost passed its limit (a BaseException so that no `except Exception`
    inside cel-python turns it into a CEL error value)."""

    def __init__(self, cost: int) -> None:
        super().__init__("operation cancelled: actual cost limit exceeded")
        self.cost = cost


class Meter:
    """The cost of one evaluation so far, and its limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.cost = 0

    def charge(self, amount: int) -> None:
        self.cost += amount
        if self.cost > self.limit:
            raise CostLimitExceeded(self.cost)


_CURRENT: ContextVar[Meter | None] = ContextVar("ephemera_cel_meter", default=None)


def size(value: Any) -> int:
    """cel-go's `actualSize`: the length of a string, bytes, list or map; 1 for the rest."""
    if isinstance(value, (str, bytes, list, dict, tuple)):
        return len(value)
    return 1


def _traverse(n: int) -> int:
    return math.ceil(n * STRING_TRAVERSAL_COST_FACTOR)


def call_cost(name: str, args: tuple[Any, ...]) -> int:
    """What a call of function (or operator) `name` with `args` costs."""
    if name in _FREE:
        return 0
    if name in _COMPARE and len(args) == 2:
        return max(1, _traverse(min(size(args[0]), size(args[1]))))
    if name == "_in_" and len(args) == 2:
        return max(1, size(args[1]))
    if name == "_+_" and len(args) == 2 and all(isinstance(a, (str, bytes)) for a in args):
        return max(1, _traverse(size(args[0]) + size(args[1])))
    if name in ("startsWith", "endsWith") and args:
        return max(1, _traverse(size(args[0])))
    if name == "contains" and len(args) == 2 and isinstance(args[0], str):
        return max(1, _traverse(size(args[0])) * _traverse(size(args[1])))
    if name == "matches" and len(args) == 2:
        return max(1, _traverse(1 + size(args[0])) * math.ceil(
            size(args[1]) * REGEX_STRING_LENGTH_COST_FACTOR))
    if name in _STRING_LIB:
        return 1 + _traverse(sum(size(a) for a in args if isinstance(a, str)))
    if name in _LIST_LIB or (name in ("indexOf", "lastIndexOf") and args
                             and isinstance(args[0], list)):
        return 1 + (size(args[0]) if args else 0)
    if name in ("indexOf", "lastIndexOf"):
        return 1 + _traverse(sum(size(a) for a in args if isinstance(a, str)))
    return 1


def _metered(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        meter = _CURRENT.get()
        # a call on an error (celpy goes on with it; cel-go stops at the error) is free
        if meter is not None and not any(isinstance(a, Exception) for a in args):
            meter.charge(call_cost(name, args))
        return function(*args)

    call.__name__ = getattr(function, "__name__", name)
    return call


@lru_cache(maxsize=1)
def functions() -> Mapping[str, Callable[..., Any]]:
    """cel-python's functions and `cellib`'s, each charging its cost when called."""
    table = {**base_functions, **FUNCTIONS}
    return {name: _metered(name, fn) for name, fn in table.items()}


class _Evaluator(Evaluator):
    """celpy's evaluator charging the meter for every node it visits and every element of a
    comprehension."""

    def __init__(self, ast: lark.Tree, activation: Activation, meter: Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _Evaluator(ast, self.activation, self.meter)

    def _visit_tree(self, tree: lark.Tree) -> Any:
        cost = _NODE_COST.get(str(tree.data))
        if cost:
            self.meter.charge(cost)
        return super()._visit_tree(tree)

    def relation(self, tree: lark.Tree) -> Any:
        """A comparison, as celpy's, without its run-time `typing.cast` of a Union (a third
        of the evaluation's time in a comparison-heavy rule)."""
        kids = tree.children
        op = _RELATIONS.get(str(getattr(kids[0], "data", ""))) if len(kids) == 2 else None
        if op is None:
            return super().relation(tree)
        function = self.activation.resolve_function(op)
        left = self._visit_tree(kids[0].children[0])
        right = self._visit_tree(kids[1])
        try:
            return function(left, right)
        except TypeError as err:
            failure = CELEvalError("no such overload", err.__class__, err.args, tree=tree)
            failure.__cause__ = err
            return failure

    def primary(self, tree: lark.Tree) -> Any:
        """An identifier or a list or map literal, which celpy resolves or builds here."""
        cost = _PRIMARY_COST.get(str(getattr(tree.children[0], "data", ""))) \
            if tree.children else None
        if cost:
            self.meter.charge(cost)
        return super().primary(tree)

    def _per_element(self, child: lark.Tree, body: Callable[[Any], Any]
                     ) -> Callable[[Any], Any]:
        macro = str(child.children[1])
        cost = _ITERATION_COST.get(macro, 1)
        meter = self.meter

        def element(value: Any) -> Any:
            meter.charge(cost)
            result = body(value)
            if macro == "filter" and isinstance(result, celtypes.BoolType) and result:
                meter.charge(_FILTER_KEPT_COST)
            return result

        return element

    def build_macro_eval(self, child: lark.Tree) -> Callable[[Any], Any]:
        return self._per_element(child, super().build_macro_eval(child))

    def build_ss_macro_eval(self, child: lark.Tree) -> Callable[[Any], Any]:
        return self._per_element(child, super().build_ss_macro_eval(child))


def evaluate(program: Any, context: Mapping[str, Any], limit: int) -> tuple[Any, int]:
    """`program` (a celpy runner made with `functions()`) evaluated over `context`, and
    its cost; the value is the exception when the evaluation failed. CostLimitExceeded (with
    the cost so far) once the cost passes `limit`."""
    meter = Meter(limit)
    token = _CURRENT.set(meter)
    try:
        evaluator = _Evaluator(program.ast, program.new_activation(), meter)
        value: Any = evaluator.evaluate(dict(context))
    except Exception as err:  # celpy's CELEvalError, or a function's: the caller words it
        value = err
    finally:
        _CURRENT.reset(token)
    return value, meter.cost
