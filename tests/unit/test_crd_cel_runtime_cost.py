"""The runtime cost of CRD CEL rules (`ephemera.api.crd.celmeter`): what an evaluation is
charged, the per-call limit that aborts it, and upstream's per-object budget and messages
through a custom resource's validation (`ephemera.api.crd.schema`)."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest

from ephemera.api.crd import cel, celcost, celmeter
from ephemera.api.crd import schema as crschema


def cost(rule: str, value: Any) -> int:
    return int(cel.evaluate(cel.compile_rule(rule), value)[1])


@pytest.mark.parametrize(("rule", "value", "expected"), [
    ("self", {}, 1),  # an identifier
    ("self.a", {"a": 1}, 2),  # and a field selection
    ("self.a == 1", {"a": 1}, 3),  # and a call; a constant costs nothing
    ("self.l[0]", {"l": [1]}, 3),  # index
    ("has(self.a) && true || false", {"a": 1}, 2),  # && and || cost nothing themselves
    ("[1, 2].size()", {}, 11),  # a list literal 10
    ("{1: 2}.size()", {}, 31),  # a map literal 30
    # strings compared by the shorter one's length x 0.1, rounded up
    ("self.a == self.b", {"a": "x" * 100, "b": "y" * 95}, 2 + 2 + 10),
    ("self.a + self.b", {"a": "x" * 100, "b": "y" * 95}, 2 + 2 + 20),
    ("self.a.contains(self.b)", {"a": "x" * 100, "b": "y" * 95}, 2 + 2 + 10 * 10),
    ("self.a.matches(self.b)", {"a": "x" * 99, "b": "y" * 8}, 2 + 2 + 10 * 2),
    ("1 in self.l", {"l": list(range(40))}, 2 + 40),
    # per element: the body, and what cel-go's expansion of the macro adds
    ("self.l.all(x, x == x)", {"l": [1, 2, 3]}, 2 + 3 * (3 + 3)),
    ("self.l.exists(x, x == x)", {"l": [1, 2, 3]}, 2 + 3 * (4 + 3)),
    ("self.l.exists_one(x, x == 1)", {"l": [1, 2, 3]}, 2 + 3 * (2 + 2)),
    ("self.l.map(x, x)", {"l": [1, 2, 3]}, 2 + 3 * (12 + 1)),
    ("self.l.filter(x, x == 1)", {"l": [1, 2, 3]}, 2 + 3 * (1 + 2) + 12),
    ("self.s.lowerAscii()", {"s": "A" * 50}, 2 + 1 + 5),  # Kubernetes' string library
])
def test_cost_is_counted_as_cel_go_counts_it(rule: str, value: Any, expected: int) -> None:
    assert cost(rule, value) == expected


def test_the_quadratic_rule_costs_as_upstream_estimates_it() -> None:
    tags = [f"tag-{i}" for i in range(10)]
    # per tag: 3 (all) + self.tags 2 + 10 x (4 (exists) + x + y + ==)
    assert cost("self.tags.all(x, self.tags.exists(y, x == y))", {"tags": tags}) == \
        2 + 10 * (3 + 2 + 10 * 7)


def test_an_evaluation_past_its_limit_is_aborted_with_its_cost() -> None:
    compiled = cel.compile_rule("self.l.all(x, x == x)")
    with pytest.raises(cel.CallCostExceeded) as over:
        cel.evaluate(compiled, {"l": list(range(1000))}, limit=100)
    assert over.value.cost == 101  # aborted at the step that passed the limit
    assert str(over.value) == "operation cancelled: actual cost limit exceeded"
    # the next evaluation starts from zero, with the default limit
    assert cel.evaluate(compiled, {"l": [1]}) == (True, 2 + 6)


def test_evaluations_in_threads_keep_their_own_count() -> None:
    compiled = cel.compile_rule("self.l.all(x, x == x)")
    results: dict[int, tuple[Any, int]] = {}

    def run(n: int) -> None:
        results[n] = cel.evaluate(compiled, {"l": list(range(n))})

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(run, n))
               for n in (5, 50, 200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: (True, 2 + n * 6) for n in (5, 50, 200)}


def test_a_failed_evaluation_still_costs_what_it_ran() -> None:
    with pytest.raises(cel.EvalError) as failed:
        cel.evaluate(cel.compile_rule("self.a.b == 1"), {"a": {}})
    assert failed.value.cost == 3


# --- through a custom resource's validation -------------------------------------------------

NEEDLE = "n" * 2000
BIG = {"type": "string", "maxLength": 9000}


def root(spec_rules: list[dict[str, Any]], item_rules: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    items: dict[str, Any] = dict(BIG)
    if item_rules:
        items["x-kubernetes-validations"] = item_rules
    return {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": spec_rules,
        "properties": {"needle": BIG, "size": {"type": "integer"},
                       "items": {"type": "array", "maxItems": 100, "items": items}}}}}


def messages(obj: Any, schema: dict[str, Any]) -> list[str]:
    return [str(e) for e in crschema.validate(obj, schema)]


def test_a_rule_over_the_per_call_limit_stops_all_rules_with_upstreams_message() -> None:
    over = "self.items.all(x, x.contains(self.needle))"
    schema = root([{"rule": "self.size > 0", "message": "size must be positive"},
                   {"rule": over}, {"rule": "self.size > 1"}],
                  item_rules=[{"rule": "self.size() < 10"}])
    # each item: contains costs 900 x 200 = 180,000; the sixth passes 1,000,000
    big = {"spec": {"size": 0, "needle": NEEDLE, "items": ["x" * 9000] * 8}}
    assert messages(big, schema) == [
        'spec: Invalid value: "object": size must be positive',
        "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': "
        "no further validation rules will be run due to call cost exceeds limit for rule: "
        + over]
    # a cheap object: every rule runs
    small = {"spec": {"size": 1, "needle": "n", "items": ["xn", "n"]}}
    assert messages(small, schema) == ['spec: Invalid value: "object": failed rule: '
                                       'self.size > 1']


def test_the_object_budget_runs_out_at_the_rule_that_does_not_fit() -> None:
    # each item's rule costs 2 + 900 x 900 = 810,002: 12 fit in 10,000,000, the 13th not
    schema = root([{"rule": "self.size >= 0"}],
                  item_rules=[{"rule": "self.contains(self)", "message": "never"}])
    obj = {"spec": {"size": 1, "items": [str(i % 10) * 9000 for i in range(14)]}}
    assert messages(obj, schema) == [
        'spec.items[12]: Invalid value: "string": validation failed due to running out of '
        "cost budget, no further validation rules will be run"]
    assert 12 * 810_002 + 3 <= celcost.RUNTIME_CEL_COST_BUDGET < 13 * 810_002 + 3
    assert messages({"spec": {"size": 1, "items": ["a" * 9000] * 12}}, schema) == []


def test_a_message_expression_is_charged_to_the_budget_and_limited_per_call() -> None:
    expression = "self.items.filter(x, x.contains(self.needle)).size() > 0 ? 'found' : 'no'"
    schema = root([{"rule": "self.size > 0", "messageExpression": expression},
                   {"rule": "self.size > 1", "message": "never reached"}])
    obj = {"spec": {"size": 0, "needle": NEEDLE, "items": ["x" * 9000] * 8}}
    assert messages(obj, schema) == [
        'spec: Invalid value: "object": no further validation rules will be run due to call '
        'cost exceeds limit for messageExpression: "' + expression + '"']
    obj["spec"]["items"] = ["x" * 9000]
    assert messages(obj, schema) == ['spec: Invalid value: "object": no',
                                     'spec: Invalid value: "object": never reached']


@pytest.mark.parametrize("rule", ["self.a.startsWith(1)", "self.a < 1", "self.a in 1",
                                  "self.a + 1 == 'x1'"])
def test_wrong_types_are_no_such_overload_in_upstreams_words(rule: str) -> None:
    """No Python type names reach the client."""
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": [{"rule": rule}]}}}
    assert messages({"spec": {"a": "x"}}, schema) == [
        "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a "
        "supported operator, function or macro signature for rule: " + rule]
    assert celmeter.call_cost("_&&_", (True, False)) == 0


@pytest.mark.parametrize(("rule", "unsupported"), [
    ('self.l.all(v, v.startsWith("a")) && has(self.m) && int(self.n) > 1', False),
    ('self.l.map(v, v.lowerAscii()).exists(w, w == "a") && type(self) == map', False),
    ("self.m.all(k, self.m[k] > 0) && self.n != null", False),
    ("isFancy(self.n)", True),
    ('quantity(self.n).isLessThan(quantity("1"))', True),
    ("self.l.all(v, v != \"\") && v != \"\"", True),  # v out of its macro's scope
])
def test_rules_that_may_go_unchecked_are_found_without_evaluating(
        rule: str, unsupported: bool) -> None:
    """The Warning pass of a write evaluates the rules only where one may be unsupported;
    a rule found supported never raises `Unsupported`."""
    assert cel.may_be_unsupported(rule) is unsupported
    value = {"l": ["ab"], "m": {"k": 1}, "n": "2"}
    raised = False
    try:
        cel.evaluate(cel.compile_rule(rule), value)
    except cel.Unsupported:
        raised = True
    except cel.EvalError:
        pass
    assert raised is unsupported
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": [{"rule": "self.size() > 0"},
                                                       {"rule": rule}]}}}
    assert crschema.may_leave_rules_unchecked(schema) is unsupported
