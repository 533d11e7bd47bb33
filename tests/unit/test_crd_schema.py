"""The pure CRD rules (`ephemera.api.crd`): a CRD's validation and structural checks, a
custom resource's schema validation, defaulting, the served (pruning) definition, CEL rules
with transition rules and messageExpression, printer-column JSONPath, version priority."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from ephemera.api import fieldvalidation, schema
from ephemera.api.crd import celcost
from ephemera.api.crd import definition as crddef
from ephemera.api.crd import schema as crschema
from ephemera.api.crd.naming import names_and_conditions, version_priority
from ephemera.apiserver import tables

ROOT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "name": {"type": "string", "maxLength": 5, "minLength": 2},
                "tags": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "set",
                         "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": True,
                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "opt": {"type": "string", "nullable": True},
                "nested": {"type": "object", "default": {},
                           "properties": {"on": {"type": "boolean", "default": True}}},
                "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "when": {"type": "string", "format": "date-time"},
            },
        },
    },
}


def messages(obj: Any, root: dict[str, Any] = ROOT, old: Any = None) -> list[str]:
    return [str(e) for e in crschema.validate(obj, root, old)]


def test_types_bounds_lengths_and_counts_have_kube_openapi_messages() -> None:
    assert messages({"spec": {"size": "x"}}) == [
        'spec.size: Invalid value: "string": spec.size in body must be of type integer: '
        '"string"']
    assert messages({"spec": {"size": 11, "name": "toolong", "tags": ["a", "b", "c"]}}) == [
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
        "spec.name: Too long: may not be more than 5 bytes",
        "spec.tags: Too many: 3: must have at most 2 items",
    ]
    assert messages({"spec": {"size": 0, "name": "a"}}) == [
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
        'spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long',
    ]
    assert messages({"spec": {"tags": ["a", "a"]}}) == ['spec.tags[1]: Duplicate value: "a"']
    assert messages({"spec": {"labels": {"k": 1}}}) == [
        'spec.labels[k]: Invalid value: "integer": spec.labels[k] in body must be of type '
        'string: "integer"']
    assert messages({"spec": {"when": "yesterday"}}) == [
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: '
        '"yesterday"']


def test_int_or_string_nullable_and_preserved_fields_are_accepted() -> None:
    assert messages({"spec": {"port": 80, "opt": None, "raw": {"x": [1, {"y": 2}]}}}) == []
    assert messages({"spec": {"port": "http"}}) == []
    assert messages({"spec": {"port": 1.5}}) == [
        'spec.port: Invalid value: "number": spec.port in body must be of type '
        'integer,string: "number"']


def test_defaults_fill_missing_fields_and_non_nullable_nulls() -> None:
    obj: dict[str, Any] = {"spec": {"size": None}}
    crschema.default(obj, ROOT)
    assert obj == {"spec": {"size": 3, "nested": {"on": True}}}
    kept: dict[str, Any] = {"spec": {"size": 5, "nested": {"on": False}}}
    crschema.default(kept, ROOT)
    assert kept == {"spec": {"size": 5, "nested": {"on": False}}}


def test_served_definition_prunes_unknown_fields_but_keeps_preserved_ones() -> None:
    name = crschema.definition_name("example.com", "v1", "Thing")
    assert name == "com.example.v1.Thing"
    schema.set_custom_definitions({name: crschema.definition(ROOT, "example.com", "v1",
                                                             "Thing")})
    try:
        obj = {"apiVersion": "example.com/v1", "kind": "Thing",
               "metadata": {"name": "t"},
               "spec": {"size": 1, "bogus": 1, "raw": {"free": 1}}, "extra": True}
        dropped = fieldvalidation.drop_unknown_fields(obj, name)
        assert dropped == ["spec.bogus", "extra"]
        assert obj["spec"] == {"size": 1, "raw": {"free": 1}}
        assert schema.definition_for("example.com/v1", "Thing") == name
    finally:
        schema.set_custom_definitions({})
    assert schema.definition_for("example.com/v1", "Thing") is None


def test_cel_rules_transition_rules_and_message_expressions() -> None:
    root = copy.deepcopy(ROOT)
    spec = root["properties"]["spec"]
    spec["x-kubernetes-validations"] = [
        {"rule": "self.size % 2 == 1", "messageExpression": "'size ' + string(self.size) + "
                                                           "' is even'"},
        {"rule": "self.size >= oldSelf.size", "message": "size may not shrink",
         "reason": "FieldValueForbidden"},
        {"rule": "has(self.name)", "fieldPath": ".name", "reason": "FieldValueRequired",
         "message": "name is required"},
    ]
    assert messages({"spec": {"size": 4, "name": "ab"}}, root) == [
        'spec: Invalid value: "object": size 4 is even']
    assert messages({"spec": {"size": 3, "name": "ab"}}, root,
                    old={"spec": {"size": 5}}) == ["spec: Forbidden: size may not shrink"]
    assert messages({"spec": {"size": 3}}, root) == ["spec.name: Required value: name is "
                                                     "required"]
    # upstream's ruleMessageOrDefault and evalMessageExpression: texts trimmed (a rule
    # spanning lines kept as written); an evaluated message that is empty, has a line break
    # inside or is over 5 KiB falls back to the rule's message
    spec["x-kubernetes-validations"] = [
        {"rule": " self.size > 10 &&\n  self.size < 20 "},
        {"rule": "self.size > 10", "message": " size too small ",
         "messageExpression": "'  size is ' + string(self.size) + '\\n'"},
        {"rule": "self.size > 11", "message": "small", "messageExpression": "'a\\nb'"},
        {"rule": "self.size > 13", "message": "wee", "messageExpression": "'   '"},
    ]
    assert messages({"spec": {"size": 4, "name": "ab"}}, root) == [
        'spec: Invalid value: "object": failed rule: self.size > 10 &&\n  self.size < 20',
        'spec: Invalid value: "object": size is 4',
        'spec: Invalid value: "object": small',
        'spec: Invalid value: "object": wee']
    long_text = "'" + "y" * (5 * 1024 + 1) + "'"
    spec["x-kubernetes-validations"] = [
        {"rule": "false", "message": "fallback", "messageExpression": long_text}]
    assert messages({"spec": {"size": 4, "name": "ab"}}, root) == [
        'spec: Invalid value: "object": fallback']
    spec["x-kubernetes-validations"] = [
        {"rule": "false", "message": "fallback", "messageExpression": long_text[:-2] + "'"}]
    assert messages({"spec": {"size": 4, "name": "ab"}}, root) == [
        'spec: Invalid value: "object": ' + "y" * (5 * 1024)]
    # a wrong type skips the rules, with upstream's note at Go's nil path
    not_checked = ('<nil>: Invalid value: "null": some validation rules were not checked '
                   "because the object was invalid; correct the existing errors to complete "
                   "validation")
    assert messages({"spec": {"size": "x"}}, root)[-1] == not_checked
    # so do a missing required field and a value too long (upstream's hasBlockingErr): the
    # rule that reads the missing field is not run, and says nothing of a missing key
    spec["required"] = ["name"]
    spec["properties"]["name"]["maxLength"] = 3
    spec["x-kubernetes-validations"] = [{"rule": "self.name != 'abc'"}]
    assert messages({"spec": {"size": 4}}, root) == ["spec.name: Required value", not_checked]
    assert messages({"spec": {"size": 4, "name": "abcd"}}, root) == [
        "spec.name: Too long: may not be more than 3 bytes", not_checked]
    assert messages({"spec": {"size": 4, "name": "abc"}}, root) == [
        'spec: Invalid value: "object": failed rule: self.name != \'abc\'']


def crd(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "things", "kind": "Thing"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": copy.deepcopy(ROOT)}}]},
    }
    body["spec"].update(spec)
    crddef.set_defaults(body)
    return body


def crd_messages(body: dict[str, Any]) -> list[str]:
    return [str(e) for e in crddef.validate_create(body)]


def test_crd_defaults_and_a_valid_crd() -> None:
    body = crd()
    assert body["spec"]["names"] == {"plural": "things", "kind": "Thing",
                                     "singular": "thing", "listKind": "ThingList"}
    assert body["spec"]["conversion"] == {"strategy": "None"}
    assert crd_messages(body) == []


def test_crd_spec_messages() -> None:
    body = crd(scope="Everywhere", versions=[
        {"name": "V1", "served": False, "storage": False,
         "schema": {"openAPIV3Schema": {"type": "object"}}}])
    body["spec"]["names"]["shortNames"] = ["Bad_Name"]
    got = crd_messages(body)
    assert 'spec.scope: Unsupported value: "Everywhere": supported values: "Cluster", ' \
           '"Namespaced"' in got
    assert any(m.startswith('spec.versions[0].name: Invalid value: "V1": a DNS-1035 label '
                            "must consist of lower case alphanumeric characters")
               for m in got)
    assert 'spec.versions: Invalid value: []string{"V1"}: must have exactly one version ' \
           "marked as storage version" in got
    assert 'spec.versions: Invalid value: []string{"V1"}: must have at least one served ' \
           "version" in got
    assert any(m.startswith('spec.names.shortNames[0]: Invalid value: "Bad_Name"')
               for m in got)
    assert crd_messages(crd(conversion={"strategy": "Webhook"})) == [
        "spec.conversion.strategy: Forbidden: " + crddef.WEBHOOK_REFUSED]


def test_structural_schema_messages() -> None:
    root = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {"type": "object", "properties": {"a": {"type": "string"}},
                     "additionalProperties": {"type": "string"}},
            "list": {"type": "array"},
            "set": {"type": "array", "uniqueItems": True, "items": {"type": "string"},
                    "x-kubernetes-list-type": "map"},
            "loose": {},
            "num": {"type": "integer", "default": "x"},
        },
    }
    path = "spec.versions[0].schema.openAPIV3Schema"
    got = [str(e) for e in crddef.validate_structural(root, crddef.Path(path))]
    assert got == [
        f"{path}.properties[metadata]: Forbidden: must not specify anything other than name "
        "and generateName, but metadata is implicitly specified",
        f"{path}.properties[spec].additionalProperties: Forbidden: additionalProperties and "
        "properties are mutual exclusive",
        f"{path}.properties[list].items: Required value: must be specified",
        f"{path}.properties[set].uniqueItems: Forbidden: uniqueItems cannot be set to true "
        "since the runtime complexity becomes quadratic",
        f"{path}.properties[set].x-kubernetes-list-map-keys: Required value: must not be "
        "empty if x-kubernetes-list-type is map",
        f"{path}.properties[loose].type: Required value: must not be empty for specified "
        "object fields",
        f'{path}.properties[num].default: Invalid value: "string": in body must be of type '
        'integer: "string"',
    ]


def test_a_root_rule_errs_at_gos_nil_path() -> None:
    """upstream's CEL validator starts from a nil path: a rule of the root schema errs at
    `<nil>`; one with a fieldPath at the field it names."""
    root = copy.deepcopy(ROOT)
    root["x-kubernetes-validations"] = [
        {"rule": "self.spec.size > 5", "message": "size too small"},
        {"rule": "self.spec.size > 6", "fieldPath": ".spec", "message": "still small"}]
    assert messages({"spec": {"size": 4, "name": "ab"}}, root) == [
        '<nil>: Invalid value: "object": size too small',
        'spec: Invalid value: "object": still small']
    assert [e.field for e in crschema.validate({"spec": {"size": 4, "name": "ab"}}, root)] == [
        "<nil>", "spec"]


def test_crd_update_rules() -> None:
    old = crd()
    old["status"] = {"conditions": [{"type": "Established", "status": "True"}],
                     "storedVersions": ["v1"]}
    new = copy.deepcopy(old)
    new["spec"]["scope"] = "Cluster"
    new["spec"]["group"] = "example.org"
    got = [str(e) for e in crddef.validate_update(new, old)]
    assert 'spec.scope: Invalid value: "Cluster": field is immutable' in got
    assert 'spec.group: Invalid value: "example.org": field is immutable' in got
    dropped = copy.deepcopy(old)
    dropped["spec"]["versions"][0]["name"] = "v2"
    assert 'status.storedVersions[0]: Invalid value: "v1": must appear in spec.versions' \
        in [str(e) for e in crddef.validate_update(dropped, old)]


def test_names_conflicts_and_establishing() -> None:
    first = crd()
    first["status"] = {"acceptedNames": copy.deepcopy(first["spec"]["names"])}
    second = crd()
    second["metadata"]["name"] = "others.example.com"
    second["spec"]["names"] = {"plural": "things", "kind": "Other", "listKind": "OtherList",
                               "singular": "other"}
    names, accepted, established = names_and_conditions(second, [first, second])
    assert accepted["status"] == "False" and accepted["reason"] == "PluralConflict"
    assert accepted["message"] == '"things" is already in use'
    assert established["status"] == "False" and established["reason"] == "NotAccepted"
    assert "plural" not in names
    names, accepted, established = names_and_conditions(first, [first, second])
    assert (accepted["status"], accepted["reason"]) == ("True", "NoConflicts")
    assert (established["status"], established["reason"]) == ("True", "InitialNamesAccepted")


def test_version_priority_and_printer_jsonpath() -> None:
    ordered = sorted(["v1beta1", "v2", "v1alpha1", "v1", "foo", "v10beta3"],
                     key=version_priority)
    assert ordered == ["v2", "v1", "v10beta3", "v1beta1", "v1alpha1", "foo"]
    obj = {"status": {"conditions": [{"type": "A", "status": "False"},
                                     {"type": "Ready", "status": "True"}]},
           "spec": {"items": [1, 2]}}
    assert tables.jsonpath_values(obj, '.status.conditions[?(@.type=="Ready")].status') == [
        "True"]
    assert tables.jsonpath_values(obj, ".spec.items[1]") == [2]
    assert tables.jsonpath_values(obj, ".spec.missing") == []
    ready = '.status.conditions[?(@.type=="Ready")].status'
    columns, cells = tables.custom_printer([
        {"name": "Ready", "type": "string", "jsonPath": ready},
        {"name": "N", "type": "integer", "jsonPath": ".spec.items[0]"}])
    assert [c["name"] for c in columns] == ["Name", "Ready", "N"]
    assert cells({"metadata": {"name": "x"}, **obj}, datetime.now(UTC)) == ["x", "True", 1]
    # a date column (the default Age, or e.g. cert-manager's `.status.notAfter`) shows an
    # age as `kubectl get` shows one, `<invalid>` for a string that is no time
    columns, cells = tables.custom_printer([
        {"name": "Expires", "type": "date", "jsonPath": ".status.notAfter"}])
    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    dated = {"metadata": {"name": "x"}, "status": {"notAfter": "2026-12-01T11:58:30Z"}}
    assert cells(dated, now) == ["x", "90s"]
    assert cells({"metadata": {"name": "x"}, "status": {"notAfter": "soon"}}, now) == [
        "x", "<invalid>"]
    assert cells({"metadata": {"name": "x"}}, now) == ["x", None]
    _, cells = tables.custom_printer([])
    assert cells({"metadata": {"name": "x", "creationTimestamp": "2026-12-01T09:00:00Z"}},
                 now) == ["x", "3h"]


def test_kubernetes_cel_library_subset_and_unsupported_functions_warn() -> None:
    root = {"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"hosts": {"type": "array", "items": {"type": "string"}},
                       "name": {"type": "string"}},
        "x-kubernetes-validations": [
            {"rule": "self.hosts.all(h, !isIP(h))", "message": "hosts cannot be IPs"},
            {"rule": "self.name.lowerAscii() == self.name", "message": "lower case only"},
            {"rule": "'%s-%d'.format([self.name, 3]) == self.name + '-3'"},
            {"rule": "self.name.split('-').size() <= 3 && ['a', 'b'].join('/') == 'a/b'"},
            {"rule": "[1, 2, 3].isSorted() && [1, 2].sum() == 3 && isCIDR('10.0.0.0/8')"},
            {"rule": "isFancy(self.name)"},
            {"rule": "self.missing == 1", "message": "never"},
        ]}}}
    errors, warnings = crschema.validate_with_warnings(
        {"spec": {"hosts": ["a.example", "10.1.2.3"], "name": "Web"}}, root)
    assert [str(e) for e in errors] == [
        'spec: Invalid value: "object": hosts cannot be IPs',
        'spec: Invalid value: "object": lower case only',
        'spec: Invalid value: "object": no such key: missing evaluating rule: never',
    ]
    assert warnings == ['spec: x-kubernetes-validations rule "isFancy(self.name)" was not '
                        'checked: ephemera\'s CEL has no function "isFancy"']


def test_embedded_resources_need_apiversion_kind_and_valid_metadata() -> None:
    root = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "x-kubernetes-preserve-unknown-fields": True}}}}}
    assert messages({"spec": {"template": {"metadata": {"name": "a/b"}}}}, root) == [
        "spec.template.apiVersion: Required value: must not be empty",
        "spec.template.kind: Required value: must not be empty",
        "spec.template.metadata.name: Invalid value: \"a/b\": may not contain '/'",
    ]
    assert messages({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
                                           "metadata": {"labels": {"app": "x"}}}}},
                    root) == []
    # the served definition gives an embedded resource ObjectMeta's fields (and pruning)
    served = crschema.definition(root, "example.com", "v1", "Thing")
    template = served["properties"]["spec"]["properties"]["template"]
    assert template["properties"]["metadata"] == {"$ref": f"#/definitions/{crschema.OBJECT_META}"}


def test_crd_with_cel_rules_warns_about_their_cost() -> None:
    plain = crd()
    assert crddef.cel_cost_warnings(plain, None) == []
    ruled = crd()
    spec = ruled["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["tags"]["items"]["x-kubernetes-validations"] = [
        {"rule": "self.size() < 10"}]
    assert crddef.cel_cost_warnings(ruled, None) == [crddef.CEL_COST_WARNING.format(
        path="spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags]"
             ".items.x-kubernetes-validations")]
    assert crddef.cel_cost_warnings(ruled, copy.deepcopy(ruled)) == []  # spec unchanged
    assert len(crddef.cel_cost_warnings(ruled, plain)) == 1


def _ruled(rule: str, where: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    """A CRD whose schema node at `where` (keys from the root) has `rule`, and `extra`."""
    body = crd()
    node = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in where:
        node = node[key]
    node.update(extra)
    node["x-kubernetes-validations"] = [{"rule": rule}]
    return body


COST_PREFIX = "spec.versions[0].schema.openAPIV3Schema.properties[spec]"


def test_cel_rules_far_over_upstreams_estimated_cost_are_refused() -> None:
    spec = ("properties", "spec")
    nested = "self.tags.all(x, self.tags.exists(y, x == y))"
    # tags has maxItems 2 in ROOT: a nested walk over it is cheap
    assert crd_messages(_ruled(nested, spec)) == []
    unbounded = _ruled(nested, spec)
    del unbounded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["tags"]["maxItems"]
    assert crd_messages(unbounded) == [
        f"{COST_PREFIX}.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost "
        "exceeds budget by factor of more than 100x (try simplifying the rule, or adding "
        "maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"]
    # `in` over an unbounded map's values walks them: with a walk of the labels around it
    assert len(crd_messages(_ruled("self.labels.all(k, self.labels[k] in self.tags)", spec))
               ) == 0  # tags is bounded
    assert len(crd_messages(_ruled("self.labels.all(k, self.labels.exists(j, j == k))",
                                   spec))) == 1
    # one walk of an unbounded list, on a node that occurs once: accepted
    assert crd_messages(_ruled("self.labels.all(k, k != 'x')", spec)) == []
    # the same walk on every item of an unbounded list (its cardinality): refused
    items_rule = _ruled("self.ports.all(p, p > 0)", spec)
    node = items_rule["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rule = node.pop("x-kubernetes-validations")
    node["properties"]["backends"] = {"type": "array", "items": {
        "type": "object", "x-kubernetes-validations": rule, "properties": {
            "ports": {"type": "array", "items": {"type": "integer"}}}}}
    assert crd_messages(items_rule) == [
        f"{COST_PREFIX}.properties[backends].items.x-kubernetes-validations[0].rule: "
        "Forbidden: " + celcost.COST_MESSAGE]
    node["properties"]["backends"]["maxItems"] = 16
    node["properties"]["backends"]["items"]["properties"]["ports"]["maxItems"] = 64
    assert crd_messages(items_rule) == []


def test_a_rule_nested_deeper_than_the_cost_walk_is_not_refused() -> None:
    """The cost bound's walk is recursive: a rule cel-python compiles but nested deeper than
    the walk goes has no bound (accepted), not an internal error."""
    deep = "(" * 100 + "self.replicas >= 0" + ")" * 100
    assert crd_messages(_ruled(deep, ("properties", "spec"))) == []


def test_a_rule_nested_deeper_than_the_evaluator_goes_warns_instead_of_refusing() -> None:
    """cel-python evaluates recursively: a deeply nested rule it cannot evaluate is reported
    as not checked, not a refusal with Python's recursion message."""
    deep = "(" * 100 + "self.replicas >= 0" + ")" * 100
    root = {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"replicas": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": deep}]}}}
    errors, warnings = crschema.validate_with_warnings({"spec": {"replicas": 1}}, root)
    assert errors == []
    assert warnings == [f'spec: x-kubernetes-validations rule "{deep}" was not checked: '
                        "nested too deeply for ephemera's CEL evaluator"]
