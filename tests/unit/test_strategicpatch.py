"""Strategic merge patch on pods: every directive, the merge keys of the pod's lists, upstream's
ordering rules (cases ported from apimachinery's patch_test.go onto pod fields) and errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ephemera.api.errors import StatusError
from ephemera.api.strategicpatch import field_node, items_node, strategic_merge_patch

POD = "io.k8s.api.core.v1.Pod"


def pod(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", **meta},
            "spec": spec if spec is not None else {"containers": [{"name": "c", "image": "a"}]}}


def containers(*items: dict[str, Any]) -> dict[str, Any]:
    return {"containers": list(items)}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "kubectl client-side apply patch (reference section 2)",
        pod(containers({"name": "c", "image": "busybox", "command": ["sleep", "3600"]}),
            annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                      '{"kind":"Pod"}'}},
         "spec": {"$setElementOrder/containers": [{"name": "c"}],
                  "containers": [{"dynamicVolumePolicy": {"mode": "Manual"}, "name": "c"}]}},
        pod(containers({"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "dynamicVolumePolicy": {"mode": "Manual"}}),
            annotations={"kubectl.kubernetes.io/last-applied-configuration": '{"kind":"Pod"}'}),
    ),
    (
        "$patch: delete of a container",
        pod(containers({"name": "a", "image": "x"}, {"name": "b", "image": "y"})),
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
        pod(containers({"name": "b", "image": "y"})),
    ),
    (
        "null deletes a key, in a map and in a merged list item",
        pod(containers({"name": "c", "image": "a", "workingDir": "/w"}),
            labels={"a": "1", "b": "2"}),
        {"metadata": {"labels": {"a": None}},
         "spec": {"containers": [{"name": "c", "workingDir": None}]}},
        pod(containers({"name": "c", "image": "a"}), labels={"b": "2"}),
    ),
    (
        "null for a key that is not there is ignored",
        pod(),
        {"metadata": {"labels": None}, "spec": {"nodeName": None}},
        pod(),
    ),
    (
        "containers merge by name: change one, add one at the end",
        pod(containers({"name": "a", "image": "x"}, {"name": "b", "image": "y"})),
        {"spec": {"containers": [{"name": "b", "image": "y2"}, {"name": "c", "image": "z"}]}},
        pod(containers({"name": "a", "image": "x"}, {"name": "b", "image": "y2"},
                       {"name": "c", "image": "z"})),
    ),
    (
        "env by name, ports by containerPort, volumeMounts by mountPath",
        pod(containers({"name": "c", "image": "a",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "volumeMounts": [{"name": "v", "mountPath": "/data"}]})),
        {"spec": {"containers": [{"name": "c",
                                  "env": [{"name": "B", "value": "3"}],
                                  "ports": [{"containerPort": 80, "protocol": "TCP"},
                                            {"containerPort": 443}],
                                  "volumeMounts": [{"mountPath": "/data", "readOnly": True}]}]}},
        pod(containers({"name": "c", "image": "a",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}],
                        "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"},
                                  {"containerPort": 443}],
                        "volumeMounts": [{"name": "v", "mountPath": "/data",
                                          "readOnly": True}]})),
    ),
    (
        "lists without the merge strategy are replaced (args, tolerations)",
        pod({"containers": [{"name": "c", "image": "a", "args": ["1", "2"]}],
             "tolerations": [{"key": "k", "operator": "Exists"}]}),
        {"spec": {"containers": [{"name": "c", "args": ["3"]}],
                  "tolerations": [{"key": "j", "operator": "Exists"}]}},
        pod({"containers": [{"name": "c", "image": "a", "args": ["3"]}],
             "tolerations": [{"key": "j", "operator": "Exists"}]}),
    ),
    (
        "maps merge",
        pod(labels={"a": "1"}),
        {"metadata": {"labels": {"b": "2"}}},
        pod(labels={"a": "1", "b": "2"}),
    ),
    (
        "$patch: replace in a map",
        pod(labels={"a": "1", "b": "2"}),
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        pod(labels={"c": "3"}),
    ),
    (
        "$patch: delete in a map empties it",
        pod(labels={"a": "1"}),
        {"metadata": {"labels": {"$patch": "delete"}}},
        pod(labels={}),
    ),
    (
        "$patch: replace item replaces a merged list",
        pod(containers({"name": "a", "image": "x"}, {"name": "b", "image": "y"})),
        {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "w"}]}},
        pod(containers({"name": "z", "image": "w"})),
    ),
    (
        "$patch: replace item alone empties a merged list",
        pod(containers({"name": "a", "image": "x"})),
        {"spec": {"containers": [{"$patch": "replace"}]}},
        pod(containers()),
    ),
    (
        "$setElementOrder reorders without content changes",
        pod(containers({"name": "a", "image": "x"}, {"name": "b", "image": "y"})),
        {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}},
        pod(containers({"name": "b", "image": "y"}, {"name": "a", "image": "x"})),
    ),
    (
        "$setElementOrder with additions (upstream: merge lists of maps)",
        pod(containers({"name": "1", "workingDir": "a"}, {"name": "2", "image": "2",
                                                          "workingDir": "b"})),
        {"spec": {"$setElementOrder/containers": [{"name": "4"}, {"name": "1"}, {"name": "2"},
                                                  {"name": "3"}],
                  "containers": [{"name": "4", "image": "4"}, {"name": "3", "image": "3"}]}},
        pod(containers({"name": "4", "image": "4"}, {"name": "1", "workingDir": "a"},
                       {"name": "2", "image": "2", "workingDir": "b"},
                       {"name": "3", "image": "3"})),
    ),
    (
        "upstream: preserve the order from the patch in a merging list",
        pod(containers({"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"})),
        {"spec": {"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"},
                                 {"name": "2", "workingDir": "x"}]}},
        pod(containers({"name": "3", "image": "c"}, {"name": "1", "image": "a"},
                       {"name": "2", "image": "b", "workingDir": "x"})),
    ),
    (
        "upstream: preserve the order from the patch in a merging list 2",
        pod(containers({"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"})),
        {"spec": {"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}},
        pod(containers({"name": "2", "image": "b"}, {"name": "3", "image": "c"},
                       {"name": "1", "image": "a"})),
    ),
    (
        "upstream: nested patch merge with a delete of a missing item",
        pod(containers({"name": "hello2"})),
        {"spec": {"$setElementOrder/containers": [{"name": "hello"}, {"name": "doesntexist"}],
                  "containers": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]}},
        pod(containers({"name": "hello"}, {"name": "hello2"})),
    ),
    (
        "upstream: delete all duplicate entries in a merging list",
        pod(containers({"name": "1"}, {"name": "1"}, {"name": "2", "image": "a"}, {"name": "3"},
                       {"name": "3"})),
        {"spec": {"containers": [{"name": "1", "$patch": "delete"},
                                 {"name": "3", "$patch": "delete"}]}},
        pod(containers({"name": "2", "image": "a"})),
    ),
    (
        "primitive merge list (finalizers): unique union, upstream order",
        pod(finalizers=["1", "2"]),
        {"metadata": {"finalizers": ["2", "3"]}},
        pod(finalizers=["1", "2", "3"]),
    ),
    (
        "primitive merge list: a new item goes first unless the live order says otherwise",
        pod(finalizers=["a", "b"]),
        {"metadata": {"finalizers": ["c"]}},
        pod(finalizers=["c", "a", "b"]),
    ),
    (
        "upstream: preserve the order from the patch in a merging int list",
        pod(finalizers=["1", "2", "3"]),
        {"metadata": {"finalizers": ["3", "1"]}},
        pod(finalizers=["2", "3", "1"]),
    ),
    (
        "$deleteFromPrimitiveList with $setElementOrder (upstream: delete items in lists of "
        "scalars)",
        pod(finalizers=["1", "2", "3", "3", "4"]),
        {"metadata": {"$setElementOrder/finalizers": ["1", "2"],
                      "$deleteFromPrimitiveList/finalizers": ["3"]}},
        pod(finalizers=["1", "2", "4"]),
    ),
    (
        "$deleteFromPrimitiveList of a missing item or list adds nothing",
        pod(finalizers=["1"]),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["9"],
                      "$deleteFromPrimitiveList/missing": ["9"]}},
        pod(finalizers=["1"]),
    ),
    (
        "$deleteFromPrimitiveList on a list without the merge strategy (args)",
        pod(containers({"name": "c", "args": ["1", "2", "3"]})),
        {"spec": {"containers": [{"name": "c", "$deleteFromPrimitiveList/args": ["2"]}]}},
        pod(containers({"name": "c", "args": ["1", "3"]})),
    ),
    (
        "$retainKeys in a volume (merge,retainKeys) drops the old volume source",
        pod({"containers": [{"name": "c"}], "volumes": [{"name": "v", "emptyDir": {}}]}),
        {"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm"},
                               "$retainKeys": ["configMap", "name"]}]}},
        pod({"containers": [{"name": "c"}],
             "volumes": [{"name": "v", "configMap": {"name": "cm"}}]}),
    ),
    (
        "a fresh value loses its nulls and directives",
        pod(),
        {"metadata": {"labels": {"a": "1", "b": None}},
         "spec": {"volumes": [{"name": "v", "emptyDir": {"medium": None}}]}},
        pod({"containers": [{"name": "c", "image": "a"}],
             "volumes": [{"name": "v", "emptyDir": {}}]}, labels={"a": "1"}),
    ),
    (
        "conditions merge by type (status)",
        {**pod(), "status": {"conditions": [{"type": "Ready", "status": "False"},
                                           {"type": "Initialized", "status": "True"}]}},
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {**pod(), "status": {"conditions": [{"type": "Ready", "status": "True"},
                                           {"type": "Initialized", "status": "True"}]}},
    ),
    (
        "a type change replaces the value",
        pod(labels={"a": "1"}),
        {"metadata": {"labels": ["x"]}},
        pod(labels=["x"]),
    ),
]


@pytest.mark.parametrize(("live", "patch", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_strategic_merge_patch(live: dict[str, Any], patch: dict[str, Any],
                               expected: dict[str, Any]) -> None:
    before = copy.deepcopy(live)
    patch_before = copy.deepcopy(patch)
    assert strategic_merge_patch(live, patch, POD) == expected
    assert live == before, "the live object must not be mutated"
    assert patch == patch_before, "the patch must not be mutated"


def test_merge_keeps_order_of_keys_in_merged_items() -> None:
    live = pod(containers({"name": "c", "image": "a", "workingDir": "/w"}))
    out = strategic_merge_patch(live, {"spec": {"containers": [{"name": "c", "tty": True}]}}, POD)
    assert list(out["spec"]["containers"][0]) == ["name", "image", "workingDir", "tty"]


def test_volume_statuses_merge_by_name_as_the_schema_declares() -> None:
    prop = field_node(field_node({"$ref": f"#/definitions/{POD}"}, "status"), "volumeStatuses")
    assert prop is not None and items_node(prop) is not None
    live = {**pod(), "status": {"volumeStatuses": [{"name": "a", "hostPhase": "Pending"},
                                                   {"name": "b", "hostPhase": "HostMounted"}]}}
    out = strategic_merge_patch(
        live, {"status": {"volumeStatuses": [{"name": "a", "hostPhase": "HostMounted"}]}}, POD)
    assert out["status"]["volumeStatuses"] == [{"name": "a", "hostPhase": "HostMounted"},
                                               {"name": "b", "hostPhase": "HostMounted"}]


@pytest.mark.parametrize(("patch", "code", "message"), [
    ({"spec": {"containers": [{"image": "b"}]}}, 400,
     "map: map[image:b] does not contain declared merge key: name"),
    ({"spec": {"containers": [{"image": "b", "x": 1e6, "y": 1000000, "z": 2.5}]}}, 400,
     "map: map[image:b x:1e+06 y:1000000 z:2.5] does not contain declared merge key: name"),
    ({"spec": {"containers": [{"name": "c", "$patch": "bogus"}]}}, 400,
     "unknown patch type: bogus in map: map[$patch:bogus name:c]"),
    ({"spec": {"containers": [{"name": "c", "$patch": "merge"}]}}, 400,
     "merging lists cannot yet be specified in the patch"),
    ({"metadata": {"labels": {"$patch": "merge"}}}, 400,
     "unknown patch type: merge in map: map[$patch:merge]"),
    ({"spec": {"$retainKeys": "containers"}}, 400, "invalid patch format of retainKeys"),
    ({"spec": {"$retainKeys": ["nodeName"], "containers": []}}, 400,
     "invalid patch format of retainKeys"),
    ({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}, 400,
     "invalid patch format of primitive list"),
    ({"metadata": {"finalizers": [["a"]]}}, 422, "lists of lists are not supported"),
])
def test_errors(patch: dict[str, Any], code: int, message: str) -> None:
    live = pod(containers({"name": "c", "image": "a"}), finalizers=["x"], labels={"a": "1"})
    with pytest.raises(StatusError) as info:
        strategic_merge_patch(live, patch, POD)
    err = info.value
    assert err.code == code
    if code == 422:
        assert err.reason == "Invalid"
        assert err.details == {"causes": [{"reason": "UnexpectedServerResponse",
                                           "message": message}]}
    else:
        assert err.message == message
        assert err.reason == ("BadRequest" if code == 400 else "")


def test_set_element_order_that_contradicts_the_patch_is_an_error() -> None:
    live = pod(containers({"name": "1"}, {"name": "3"}, {"name": "2"}))
    patch = {"spec": {"$setElementOrder/containers": [{"name": "1"}, {"name": "2"},
                                                      {"name": "3"}],
                      "containers": [{"name": "3", "image": "3"}, {"name": "1", "image": "1"}]}}
    with pytest.raises(StatusError) as info:
        strategic_merge_patch(live, patch, POD)
    assert "doesn't match $setElementOrder list" in info.value.message
    assert (info.value.code, info.value.reason) == (400, "BadRequest")


def test_unknown_fields_merge_maps_and_replace_lists() -> None:
    live = pod(containers({"name": "c", "extra": {"a": 1, "l": [1, 2]}}))
    out = strategic_merge_patch(
        live, {"spec": {"containers": [{"name": "c", "extra": {"b": 2, "l": [3]}}]}}, POD)
    assert out["spec"]["containers"][0]["extra"] == {"a": 1, "l": [3], "b": 2}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "spec", "status", "x"]),
                       JSON, max_size=5))
def test_empty_patch_is_identity(live: dict[str, Any]) -> None:
    out = strategic_merge_patch(live, {}, POD)
    assert out == live
    assert out is not live
