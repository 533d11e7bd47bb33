"""The diff a rejected pod update shows (`ephemera.pods.specdiff`), in go-cmp's shape: both
specs walked in Go's field order whatever their JSON key order, so only what changed is
marked."""

from __future__ import annotations

import json
from typing import Any

from ephemera.pods.specdiff import spec_diff

T = "\t"


def spec() -> dict[str, Any]:
    return {
        "volumes": [{"name": "data", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}],
        "containers": [{"name": "c", "image": "busybox",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "nodeName": "n1", "schedulerName": "default-scheduler",
        "priority": 0, "enableServiceLinks": True}


def reordered(value: Any) -> Any:
    """The same JSON with every object's keys in reverse order (as another client might
    send them)."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


def lines(text: str) -> list[str]:
    return text.replace(T, "\\t").splitlines()


def test_a_changed_volume_field_is_the_only_marked_line() -> None:
    old = spec()
    new = reordered(json.loads(json.dumps(old)))
    new["volumes"][1]["configMap"]["defaultMode"] = 256
    assert lines(spec_diff(old, new)) == [
        "  core.PodSpec{",
        "  \\tVolumes: []core.Volume{",
        '  \\t\\t{Name: "data", VolumeSource: {EmptyDir: &{}}},',
        "  \\t\\t{",
        '  \\t\\t\\tName: "cfg",',
        "  \\t\\t\\tVolumeSource: core.VolumeSource{",
        "  \\t\\t\\t\\tConfigMap: &core.ConfigMapVolumeSource{",
        '  \\t\\t\\t\\t\\tName:        "settings",',
        "- \\t\\t\\t\\t\\tDefaultMode: 420,",
        "+ \\t\\t\\t\\t\\tDefaultMode: 256,",
        "  \\t\\t\\t\\t},",
        "  \\t\\t\\t},",
        "  \\t\\t},",
        "  \\t},",
        '  \\tContainers:    {{Name: "c", Image: "busybox", VolumeMounts: {{Name: "data", '
        'MountPath: "/data"}}, ImagePullPolicy: "IfNotPresent"}},',
        '  \\tRestartPolicy: "Always",',
        "  \\t... // 6 identical fields",
        "  }",
    ]


def test_an_added_volume_and_mount_are_added_elements() -> None:
    old = spec()
    new = json.loads(json.dumps(old))
    new["volumes"].append({"name": "extra", "emptyDir": {"medium": "Memory"}})
    new["containers"][0]["volumeMounts"].append({"name": "extra", "mountPath": "/x"})
    assert lines(spec_diff(old, new)) == [
        "  core.PodSpec{",
        "  \\tVolumes: []core.Volume{",
        '  \\t\\t{Name: "data", VolumeSource: {EmptyDir: &{}}},',
        '  \\t\\t{Name: "cfg", VolumeSource: {ConfigMap: &{Name: "settings", DefaultMode: 420}}},',
        '+ \\t\\t{Name: "extra", VolumeSource: {EmptyDir: &{Medium: "Memory"}}},',
        "  \\t},",
        "  \\tContainers: []core.Container{",
        "  \\t\\t{",
        '  \\t\\t\\tName:  "c",',
        '  \\t\\t\\tImage: "busybox",',
        "  \\t\\t\\tVolumeMounts: []core.VolumeMount{",
        '  \\t\\t\\t\\t{Name: "data", MountPath: "/data"},',
        '+ \\t\\t\\t\\t{Name: "extra", MountPath: "/x"},',
        "  \\t\\t\\t},",
        '  \\t\\t\\tImagePullPolicy: "IfNotPresent",',
        "  \\t\\t},",
        "  \\t},",
        '  \\tRestartPolicy:                 "Always",',
        "  \\tTerminationGracePeriodSeconds: 30,",
        "  \\t... // 5 identical fields",
        "  }",
    ]


def test_a_scalar_change_folds_what_is_far_from_it() -> None:
    old = spec()
    new = json.loads(json.dumps(old))
    new["nodeName"] = "n2"
    new["volumes"].pop()
    assert lines(spec_diff(old, new)) == [
        "  core.PodSpec{",
        "  \\tVolumes: []core.Volume{",
        '  \\t\\t{Name: "data", VolumeSource: {EmptyDir: &{}}},',
        '- \\t\\t{Name: "cfg", VolumeSource: {ConfigMap: &{Name: "settings", DefaultMode: 420}}},',
        "  \\t},",
        '  \\tContainers:                    {{Name: "c", Image: "busybox", VolumeMounts: '
        '{{Name: "data", MountPath: "/data"}}, ImagePullPolicy: "IfNotPresent"}},',
        '  \\tRestartPolicy:                 "Always",',
        "  \\tTerminationGracePeriodSeconds: 30,",
        '  \\tDNSPolicy:                     "ClusterFirst",',
        '- \\tNodeName:                      "n1",',
        '+ \\tNodeName:                      "n2",',
        '  \\tSchedulerName:                 "default-scheduler",',
        "  \\tPriority:                      0,",
        "  \\tEnableServiceLinks:            true,",  # go-cmp shows a lone one, not "... // 1"
        "  }",
    ]


def test_a_field_added_where_there_was_none_shows_the_zero_value() -> None:
    old = spec()
    new = json.loads(json.dumps(old))
    new["hostNetwork"] = True
    new["activeDeadlineSeconds"] = 5
    assert lines(spec_diff(old, new)) == [
        "  core.PodSpec{",
        "  \\t... // 2 identical fields",
        '  \\tRestartPolicy:                 "Always",',
        "  \\tTerminationGracePeriodSeconds: 30,",
        "- \\tActiveDeadlineSeconds:         nil,",
        "+ \\tActiveDeadlineSeconds:         5,",
        '  \\tDNSPolicy:                     "ClusterFirst",',
        '  \\tNodeName:                      "n1",',
        "- \\tHostNetwork:                   false,",
        "+ \\tHostNetwork:                   true,",
        '  \\tSchedulerName:                 "default-scheduler",',
        "  \\tPriority:                      0,",
        "  \\tEnableServiceLinks:            true,",
        "  }",
    ]
