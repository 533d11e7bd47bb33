"""`x-kubernetes-validations`: CEL rules compiled and evaluated with cel-python (`celpy`).

A rule sees the value of its schema node as `self` and, on an update where the old object
has a value at the same place, that old value as `oldSelf`; a rule that names `oldSelf` (a
transition rule) is skipped when there is no old value, as upstream skips it. A rule that
evaluates to false is a field error at the node's path (or at `fieldPath`), with the
`message`, the string `messageExpression` evaluates to, or upstream's `failed rule: RULE`,
of the rule's `reason` (default `FieldValueInvalid`).

cel-python has the standard CEL functions; `ephemera.api.crd.cellib` adds the most used
of Kubernetes' libraries. A rule that calls a function neither has is not enforced: its
evaluation raises `Unsupported`, which the caller reports as a warning, as it does a rule
nested deeper than cel-python's recursive evaluator goes (`TooDeep`). Of upstream's static
cost estimate only a lower bound is checked (`celcost`); at run time every evaluation is
metered as cel-go meters it (`celmeter`) and aborted past its limit (`CallCostExceeded`);
each result comes with its cost, which the caller charges to the object's budget.
"""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ephemera.api.crd.celcost import MACROS, PER_CALL_LIMIT, comprehension_variable

# celpy (and its grammar) is imported when the first rule is compiled, not with the
# apiserver: it costs a second or more of start-up.

_OLD_SELF = re.compile(r"\boldSelf\b")

# celpy's environment and parser keep the text and program being built on themselves: one
# compilation at a time (rules of custom resources are validated in worker threads).
_COMPILING = threading.Lock()

# `reason` -> the field error type its failure is reported as.
REASONS = {"FieldValueInvalid": "Invalid", "FieldValueForbidden": "Forbidden",
           "FieldValueRequired": "Required", "FieldValueDuplicate": "Duplicate"}


class CompileError(Exception):
    """A rule or messageExpression that does not compile (the text is celpy's)."""


@dataclass(frozen=True)
class Compiled:
    program: Any
    transition: bool
    tree: Any = None  # celpy's parse tree (lark), for the cost bound of `celcost`


@lru_cache(maxsize=1)
def _celpy() -> Any:
    import celpy

    return celpy


@lru_cache(maxsize=1)
def _environment() -> Any:
    """celpy's environment, made once. celpy raises the interpreter's recursion limit
    when it makes one; the limit the rest of ephemera is written against is put back (CEL
    rules are short)."""
    limit = sys.getrecursionlimit()
    try:
        return _celpy().Environment()
    finally:
        sys.setrecursionlimit(limit)


@lru_cache(maxsize=4096)
def compile_rule(text: str) -> Compiled:
    """The rule compiled (cached by its text); CompileError when it does not parse."""
    from ephemera.api.crd import celmeter

    env = _environment()
    try:
        with _COMPILING:
            ast = env.compile(text)
            program = env.program(ast, functions=dict(celmeter.functions()))
    except _celpy().celparser.CELParseError as err:  # the rule's text does not parse
        raise CompileError(_one_line(str(err))) from None
    except Exception:  # celpy failed building the program: no Python text to the client
        raise CompileError("compilation failed") from None
    return Compiled(program, bool(_OLD_SELF.search(text)), ast)


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


class EvalError(Exception):
    """A rule that could not be evaluated (no such key, wrong types, ...); `cost`: what the
    evaluation cost until it failed."""

    cost: int = 0


class CallCostExceeded(Exception):
    """The evaluation passed its per-call cost limit and was aborted (cel-go's
    "operation cancelled: actual cost limit exceeded"); `cost`: the cost counted."""

    def __init__(self, cost: int) -> None:
        super().__init__(CALL_COST_EXCEEDED)
        self.cost = cost


CALL_COST_EXCEEDED = "operation cancelled: actual cost limit exceeded"
NO_SUCH_OVERLOAD = "no such overload"


class Unsupported(EvalError):
    """A rule that calls a function this CEL has not (the function's name)."""


class TooDeep(EvalError):
    """A rule nested deeper than cel-python's recursive evaluator goes (it is not checked)."""

    def __init__(self) -> None:
        super().__init__("nested too deeply for ephemera's CEL evaluator")


_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")
_NO_SUCH_MEMBER = re.compile(r"no such member in mapping: '([^']*)'")


def _eval_error(err: BaseException) -> EvalError:
    """celpy's error as a short message in upstream's words where they exist; never the
    evaluator's internals (its activation's repr); Python's recursion limit is `TooDeep`."""
    if isinstance(err, RecursionError):
        return TooDeep()
    text = str(err.args[0]) if getattr(err, "args", None) else str(err)
    undeclared = _UNDECLARED.search(text)
    if undeclared:
        return Unsupported(undeclared.group(1))
    member = _NO_SUCH_MEMBER.search(text)
    if member:
        return EvalError(f"no such key: {member.group(1)}")
    if text.startswith(("no such overload", "found no matching overload")):
        return EvalError(NO_SUCH_OVERLOAD)  # celpy's text names Python types
    text = text.split(" (in activation", 1)[0]
    return EvalError(_one_line(text)[:200] or "evaluation failed")


def evaluate(compiled: Compiled, value: Any, old: Any = None, has_old: bool = False,
             limit: int = PER_CALL_LIMIT) -> tuple[Any, int]:
    """The rule's result as a Python value (bool for rules, str for message expressions)
    and its cost; EvalError or CallCostExceeded (past `limit`) with the cost so far."""
    from ephemera.api.crd import celmeter

    celpy = _celpy()
    activation: dict[str, Any] = {"self": celpy.json_to_cel(value)}
    if has_old:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:  # celmeter returns an evaluation's failure as its value
        result, cost = celmeter.evaluate(compiled.program, activation, limit)
    except celmeter.CostLimitExceeded as over:
        raise CallCostExceeded(over.cost) from None
    if isinstance(result, Exception):
        failure = _eval_error(result)
        failure.cost = cost
        raise failure from None
    if isinstance(result, celpy.celtypes.BoolType):
        return bool(result), cost
    if isinstance(result, celpy.celtypes.StringType):
        return str(result), cost
    return result, cost


_BUILT_IN = frozenset({"self", "oldSelf", "has"})


@lru_cache(maxsize=4096)
def may_be_unsupported(text: str) -> bool:
    """Whether evaluating the rule can raise `Unsupported`: it calls a function, or names a
    variable, this CEL has not (False for a rule that does not compile: that is an error,
    not a warning). A rule without any can be left out of a pass that only looks for
    unchecked rules."""
    from ephemera.api.crd import celmeter

    try:
        tree = compile_rule(text).tree
    except CompileError:
        return False
    return _names_unknown(tree, frozenset(celmeter.functions()) | _BUILT_IN)


def _names_unknown(tree: Any, known: frozenset[str]) -> bool:
    kids = list(getattr(tree, "children", []))
    data = str(getattr(tree, "data", ""))
    if data == "member_dot_arg" and len(kids) >= 2:
        name = str(kids[1])
        args = list(getattr(kids[2], "children", [])) if len(kids) > 2 else []
        if name in MACROS and len(args) == 2:
            variable = comprehension_variable(args[0])
            inner = known | frozenset([variable] if variable else [])
            return _names_unknown(kids[0], known) or _names_unknown(args[1], inner)
        if name not in known:
            return True
    elif data in ("ident_arg", "dot_ident_arg", "ident", "dot_ident") and kids \
            and str(kids[0]) not in known:
        return True
    return any(_names_unknown(kid, known) for kid in kids if hasattr(kid, "data"))
