"""Label and field selectors: parsing, matching, and upstream's error messages."""

from __future__ import annotations

import pytest

from ephemera.api.selectors import (
    FieldSelector,
    LabelSelector,
    Selection,
    SelectorError,
    field_values,
)

LABELS = {"app": "web", "tier": "front", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db, cache)", True),
        ("app notin (web)", False),
        ("missing notin (web)", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("app=web, !missing, tier in (front)", True),
        ("n>4", True),
        ("n<4", False),
        ("missing>1", False),
        ("app=web,app=web", True),
        ("app=", False),
        ("empty=", True),
    ],
)
def test_label_selector_matches(selector: str, expected: bool) -> None:
    labels = dict(LABELS, empty="")
    assert LabelSelector.parse(selector).matches(labels) is expected


def test_label_selector_matches_none_labels() -> None:
    assert LabelSelector.parse("!app").matches(None)
    assert not LabelSelector.parse("app").matches(None)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app in web", "unable to parse requirement: found 'web' expected: '('"),
        ("=web", "found '=', expected: !, identifier, or 'end of string'"),
        ("app=web,", "found '', expected: identifier after ','"),
        ("app web", "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, "
                    "gt, lt"),
        ("a b c=d", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, "
                    "lt"),
        ("n>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' "
                "operators, the value must be an integer"),
    ],
)
def test_label_selector_errors(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as err:
        LabelSelector.parse(selector)
    assert str(err.value) == message


def test_label_selector_invalid_key_and_value() -> None:
    with pytest.raises(SelectorError, match=r'key: Invalid value: "-bad"'):
        LabelSelector.parse("-bad=x")
    with pytest.raises(SelectorError, match=r'values\[0\]\[app\]: Invalid value: "-x-"'):
        LabelSelector.parse("app=-x-")


def test_label_selector_roundtrip_text() -> None:
    text = "app=web,tier in (a,b),!x,y"
    assert str(LabelSelector.parse(text)) == "app=web,tier in (a,b),!x,y"


POD = {
    "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "web"}},
    "spec": {"nodeName": "n1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name=p2", False),
        ("metadata.name!=p2", True),
        ("metadata.name=p1,metadata.name=p1", True),  # kr8s sends it twice
        ("metadata.namespace=default,spec.nodeName=n1", True),
        ("spec.nodeName=", False),
        ("status.phase=Running", True),
        ("status.phase!=Running", False),
    ],
)
def test_field_selector_on_pods(selector: str, expected: bool) -> None:
    assert Selection.parse("Pod", None, selector).matches(POD) is expected


def test_unscheduled_pod_matches_empty_node_name() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {}}
    assert Selection.parse("Pod", None, "spec.nodeName=").matches(pod)
    assert not Selection.parse("Pod", None, "spec.nodeName!=").matches(pod)


def test_field_selector_unsupported_field_message() -> None:
    with pytest.raises(SelectorError) as err:
        Selection.parse("ConfigMap", None, "spec.nodeName=n1")
    assert str(err.value) == "field label not supported: spec.nodeName"
    with pytest.raises(SelectorError, match=r"^field label not supported: foo$"):
        Selection.parse("Pod", None, "foo=bar")


def test_event_involved_object_fields() -> None:
    event = {
        "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default", "uid": "u1"},
        "reason": "Scheduled",
        "type": "Normal",
        "source": {"component": "scheduler"},
    }
    sel = Selection.parse(
        "Event", None,
        "involvedObject.name=p1,involvedObject.namespace=default,involvedObject.uid=u1")
    assert sel.matches(event)
    assert not Selection.parse("Event", None, "involvedObject.uid=u2").matches(event)
    assert Selection.parse("Event", None, "reason=Scheduled,type=Normal,source=scheduler"
                           ).matches(event)


def test_field_selector_escapes_and_errors() -> None:
    sel = FieldSelector.parse(r"metadata.name=a\,b")
    assert sel.terms[0].value == "a,b"
    with pytest.raises(SelectorError) as err:
        FieldSelector.parse("metadata.name")
    assert str(err.value) == "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    with pytest.raises(SelectorError, match="unescaped character in value: 61"):
        FieldSelector.parse("metadata.name=a=b")
    with pytest.raises(SelectorError, match=r"invalid escape sequence: \\x"):
        FieldSelector.parse(r"metadata.name=a\x")


def test_field_selector_exact() -> None:
    sel = FieldSelector.parse("metadata.name=p1,metadata.name=p1,metadata.namespace!=x")
    assert sel.exact("metadata.name") == "p1"
    assert sel.exact("metadata.namespace") is None
    assert FieldSelector.parse("metadata.name=a,metadata.name=b").exact("metadata.name") is None


def test_label_and_field_together() -> None:
    sel = Selection.parse("Pod", "app=web", "spec.nodeName=n1")
    assert sel.matches(POD)
    assert not Selection.parse("Pod", "app=db", "spec.nodeName=n1").matches(POD)


def test_field_values_of_boolean_fields() -> None:
    assert field_values("Node", {"spec": {}})["spec.unschedulable"] == "false"
    assert field_values("Pod", {"spec": {"hostNetwork": True}})["spec.hostNetwork"] == "true"
