"""Generic ObjectMeta, name, label and annotation validation (`ephemera.api.validation`):
exact upstream messages and field paths."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api import validation as v
from ephemera.api.field import Path

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def strs(errs: list[Any]) -> list[str]:
    return [str(e) for e in errs]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ok", []),
        ("a-1", []),
        ("X", [f'spec.volumes[1].name: Invalid value: "X": {LABEL_MSG}']),
        ("-a", [f'spec.volumes[1].name: Invalid value: "-a": {LABEL_MSG}']),
        ("a.b", ['spec.volumes[1].name: Invalid value: "a.b": must not contain dots']),
        ("a" * 63, []),
        ("a" * 64, [f'spec.volumes[1].name: Invalid value: "{"a" * 64}": '
                    "must be no more than 63 characters"]),
    ],
)
def test_dns1123_label(value: str, expected: list[str]) -> None:
    path = Path("spec").child("volumes").index(1).child("name")
    assert strs(v.validate_dns1123_label(value, path)) == expected


def test_dns1123_subdomain() -> None:
    assert v.validate_dns1123_subdomain("a.b-c", "x") == []
    assert strs(v.validate_dns1123_subdomain("A_b", "metadata.name")) == [
        f'metadata.name: Invalid value: "A_b": {SUBDOMAIN_MSG}']
    long = "a" * 254
    assert strs(v.validate_dns1123_subdomain(long, "n"))[0] == (
        f'n: Invalid value: "{long}": must be no more than 253 characters')


@pytest.mark.parametrize(
    ("key", "messages"),
    [
        ("app", []),
        ("example.com/app", []),
        ("Example.com/App", ["prefix part " + SUBDOMAIN_MSG]),
        ("/app", ["prefix part must be non-empty"]),
        ("example.com/", ["name part must be non-empty", NAME_PART_MSG]),
        ("-bad", [NAME_PART_MSG]),
        ("a" * 64, ["name part must be no more than 63 characters"]),
    ],
)
def test_label_keys(key: str, messages: list[str]) -> None:
    errs = v.validate_labels({key: "v"}, Path("metadata", "labels"))
    assert [e.message() for e in errs] == [f"Invalid value: {_q(key)}: {m}" for m in messages]
    assert all(e.field == "metadata.labels" for e in errs)


def _q(s: str) -> str:
    return '"' + s + '"'


def test_label_values() -> None:
    assert v.validate_labels({"a": ""}, "metadata.labels") == []
    assert strs(v.validate_labels({"a": "-x"}, "metadata.labels")) == [
        f'metadata.labels: Invalid value: "-x": {LABEL_VALUE_MSG}']
    assert strs(v.validate_labels({"a": "x" * 64}, "metadata.labels")) == [
        f'metadata.labels: Invalid value: "{"x" * 64}": must be no more than 63 characters']


def test_annotations_keys_case_insensitive_and_size() -> None:
    assert v.validate_annotations({"Example.COM/Key": "v"}, "metadata.annotations") == []
    errs = v.validate_annotations({"a/b/c": "v"}, "metadata.annotations")
    assert len(errs) == 1 and errs[0].field == "metadata.annotations"
    assert errs[0].message().startswith('Invalid value: "a/b/c": a qualified name must consist')
    big = {"k": "x" * (256 * 1024)}
    assert strs(v.validate_annotations(big, "metadata.annotations")) == [
        "metadata.annotations: Too long: may not be more than 262144 bytes"]
    fits = {"k": "x" * (256 * 1024 - 1)}
    assert v.validate_annotations(fits, "metadata.annotations") == []


def test_object_meta_create() -> None:
    ok = {"name": "web-1", "namespace": "default", "labels": {"app": "web"}}
    assert v.validate_object_meta(ok, namespaced=True) == []
    assert strs(v.validate_object_meta({"namespace": "default"}, namespaced=True)) == [
        "metadata.name: Required value: name or generateName is required"]
    assert strs(v.validate_object_meta({"name": "Web"}, namespaced=True)) == [
        f'metadata.name: Invalid value: "Web": {SUBDOMAIN_MSG}',
        "metadata.namespace: Required value",
    ]
    assert strs(v.validate_object_meta({"name": "n", "namespace": "x"}, namespaced=False)) == [
        "metadata.namespace: Forbidden: not allowed on this type"]
    # a generateName may end with a dash
    assert v.validate_object_meta(
        {"generateName": "web-", "name": "web-abcde", "namespace": "d"}, namespaced=True) == []
    assert strs(v.validate_object_meta(
        {"name": "n", "namespace": "Bad_ns"}, namespaced=True))[0].startswith(
        'metadata.namespace: Invalid value: "Bad_ns": a lowercase RFC 1123 label')
    assert strs(v.validate_object_meta({"name": "n", "namespace": "d", "generation": -1},
                                       namespaced=True)) == [
        "metadata.generation: Invalid value: -1: must be greater than or equal to 0"]


def test_object_meta_namespace_name_is_label() -> None:
    errs = v.validate_object_meta({"name": "a.b"}, namespaced=False, name_fn=v.dns_label_name)
    assert strs(errs) == ['metadata.name: Invalid value: "a.b": must not contain dots']


def test_finalizers() -> None:
    assert v.validate_finalizers(["kubernetes", "example.com/x"], "metadata.finalizers") == []
    assert strs(v.validate_finalizers(["custom"], Path("metadata", "finalizers"))) == [
        'metadata.finalizers[0]: Invalid value: "custom": '
        "name is neither a standard finalizer name nor is it fully qualified"]
    both = strs(v.validate_finalizers(["orphan", "foregroundDeletion"], "metadata.finalizers"))
    assert both == ['metadata.finalizers: Invalid value: []string{"orphan", "foregroundDeletion"}: '
                    "finalizer orphan and foregroundDeletion cannot be both set"]


def test_object_meta_update_immutable_fields() -> None:
    old = {"name": "a", "namespace": "d", "uid": "u1", "creationTimestamp": "t",
           "generation": 3}
    assert v.validate_object_meta_update(dict(old), old) == []
    new = dict(old, name="b", namespace="e", uid="u2", generation=2)
    assert strs(v.validate_object_meta_update(new, old)) == [
        "metadata.generation: Invalid value: 2: must not be decremented",
        'metadata.name: Invalid value: "b": field is immutable',
        'metadata.namespace: Invalid value: "e": field is immutable',
        'metadata.uid: Invalid value: "u2": field is immutable',
    ]


def test_finalizers_without_the_kube_rule_are_apimachinerys_check() -> None:
    """Custom resources and CRDs: qualified names on the list's path, no standard-name rule
    (apimachinery's `ValidateFinalizers`); apimachinery checks no names on update."""
    md = {"name": "a", "finalizers": ["sandboxpool.ops.example.com", "bad name"]}
    assert strs(v.validate_object_meta(md, namespaced=False, kube_finalizers=False)) == [
        'metadata.finalizers: Invalid value: "bad name": name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]
    assert v.validate_object_meta_update(md, {"name": "a"}, kube_finalizers=False) == []
    assert strs(v.validate_object_meta_update({"name": "a", "finalizers": ["x"]},
                                              {"name": "a"})) == [
        'metadata.finalizers[0]: Invalid value: "x": '
        "name is neither a standard finalizer name nor is it fully qualified"]


def test_finalizer_name_warnings_for_added_unprefixed_names() -> None:
    """apiextensions' `validateKubeFinalizerName` as warnings: only the finalizers a write
    adds, sorted, and not standard ones or ones with a path."""
    prefer = ("prefer a domain-qualified finalizer name including a path (/) to avoid "
              "accidental conflicts with other finalizer writers")
    assert v.finalizer_name_warnings(["z.example.com", "orphan", "example.com/x", "a"]) == [
        f'metadata.finalizers: "a": {prefer}',
        f'metadata.finalizers: "z.example.com": {prefer}']
    assert v.finalizer_name_warnings(["a", "b"], ["a"]) == [f'metadata.finalizers: "b": {prefer}']
    assert v.finalizer_name_warnings(None, ["a"]) == []


def test_object_meta_update_no_new_finalizers_while_deleting() -> None:
    old = {"name": "a", "deletionTimestamp": "t", "finalizers": ["example.com/a"]}
    new = dict(old, finalizers=["example.com/a", "example.com/b"])
    assert strs(v.validate_object_meta_update(new, old)) == [
        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being "
        'deleted, found new finalizers []string{"example.com/b"}']


def test_object_meta_update_resource_version_opt_in() -> None:
    assert v.validate_object_meta_update({"name": "a"}, {"name": "a"}) == []
    assert strs(v.validate_object_meta_update({"name": "a"}, {"name": "a"},
                                              require_resource_version=True)) == [
        'metadata.resourceVersion: Invalid value: "": must be specified for an update']


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("http", []),
        ("http-alt", []),
        ("123", ["must contain at least one letter (a-z)"]),
        ("a--b", ["must not contain consecutive hyphens"]),
        ("-a", ["must not begin or end with a hyphen"]),
        ("HTTP", ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                  "must contain at least one letter (a-z)"]),
        ("abcdefghijklmnop", ["must be no more than 15 characters"]),
    ],
)
def test_port_names(name: str, messages: list[str]) -> None:
    assert v.port_name_errors(name) == messages


def test_env_var_names_and_ranges() -> None:
    assert v.env_var_name_errors("MY_VAR.1-x") == []
    assert v.env_var_name_errors("1abc") == []  # relaxed validation is GA
    assert v.env_var_name_errors("A=B") == [
        "a valid environment variable name must consist only of printable ASCII characters "
        "other than '='"]
    assert v.port_num_errors(0) == ["must be between 1 and 65535, inclusive"]
    assert v.port_num_errors(65535) == []
    assert v.validate_nonnegative_field(0, "x") == []
    assert v.validate_immutable_field("a", "a", "x") == []


def test_config_map_keys() -> None:
    assert v.config_map_key_errors("key.name") == []
    assert v.config_map_key_errors("..a") == ["must not start with '..'"]
    assert v.config_map_key_errors("a b")[0].startswith(
        "a valid config key must consist of alphanumeric characters")


def test_now_rfc3339_is_the_current_second() -> None:
    from ephemera.api.meta import now, now_rfc3339, rfc3339

    before = rfc3339(now())
    stamp = now_rfc3339()
    after = rfc3339(now())
    assert before <= stamp <= after
    assert len(stamp) == len("2026-12-01T00:00:00Z") and stamp.endswith("Z")


FORKED_NAMES = """
import json, multiprocessing
from ephemera.api.meta import generate_name

def names(results):
    results.put([generate_name("web-") for _ in range(5)])

if __name__ == "__main__":
    generate_name("web-")  # the parent has drawn before it forks, as a serving process has
    context = multiprocessing.get_context("fork")
    results = context.SimpleQueue()
    children = [context.Process(target=names, args=(results,)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        assert child.exitcode == 0, child.exitcode
    print(json.dumps([results.get(), results.get()]))
"""


def test_generated_names_differ_between_forked_workers() -> None:
    """Apiserver workers are processes: each must draw its own names after the fork, or two
    workers would answer two generateName creates with the same name. The forking parent is a
    fresh interpreter, as an apiserver is before it forks: a fork of this test process would
    inherit whatever gRPC threads earlier tests left running."""
    import json
    import subprocess
    import sys

    from ephemera.api.meta import GENERATE_NAME_ALPHABET, generate_name

    out = subprocess.run([sys.executable, "-c", FORKED_NAMES], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    first, second = json.loads(out)
    assert first != second
    for name in first + second:
        assert name.startswith("web-") and len(name) == len("web-") + 5
        assert all(c in GENERATE_NAME_ALPHABET for c in name[4:])
    long = generate_name("x" * 70)
    assert long.startswith("x" * 58) and len(long) == 63

