"""The served schema (src/ephemera/api/data/definitions.json, from scripts/gen_schema.py):
the KEP fields, list-map keys, descriptions in our own words."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources

import pytest
from scripts_testing import REPO, gen_schema

from ephemera.api import schema

CORE = "io.k8s.api.core.v1."
DATA_TEXT = resources.files("ephemera.api").joinpath("data/definitions.json").read_text()


def prop(definition: str, name: str) -> dict:
    return schema.definition(CORE + definition)["properties"][name]


def test_container_has_dynamic_volume_policy_with_restart_policy() -> None:
    node = prop("Container", "dynamicVolumePolicy")
    policy = schema.resolve(node)
    assert policy is schema.definition(CORE + "ContainerDynamicVolumePolicy")
    assert policy["type"] == "object"
    assert policy["properties"]["restartPolicy"]["type"] == "string"
    assert "RestartContainer" in policy["properties"]["restartPolicy"]["description"]


def test_pod_status_volume_statuses_is_a_list_map_keyed_by_name() -> None:
    node = prop("PodStatus", "volumeStatuses")
    assert node["type"] == "array"
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == ["name"]
    assert node["x-kubernetes-patch-merge-key"] == "name"
    assert node["x-kubernetes-patch-strategy"] == "merge"
    item = schema.resolve(node["items"])
    assert set(item["properties"]) == {"name", "hostPhase", "errorMessage"}
    assert item["required"] == ["name"]
    for phase in ("Pending", "HostMounted", "ErrorMounting", "Unmounting"):
        assert phase in item["properties"]["hostPhase"]["description"]


def test_container_status_volume_mounts_is_keyed_by_mount_path() -> None:
    node = prop("ContainerStatus", "volumeMounts")
    assert node["x-kubernetes-list-map-keys"] == ["mountPath"]
    item = schema.resolve(node["items"])
    assert {"name", "mountPath", "readOnly"} <= set(item["properties"])


def test_pod_spec_resources_is_resource_requirements_of_quantities() -> None:
    node = prop("PodSpec", "resources")
    requirements = schema.resolve(node)
    assert requirements is schema.definition(CORE + "ResourceRequirements")
    limits = requirements["properties"]["limits"]
    assert limits["additionalProperties"]["$ref"].endswith("resource.Quantity")
    assert "ephemeral-storage" in node["description"]


def test_containers_merge_by_name() -> None:
    node = prop("PodSpec", "containers")
    assert node["x-kubernetes-patch-merge-key"] == "name"
    assert node["x-kubernetes-patch-strategy"] == "merge"
    assert node["x-kubernetes-list-map-keys"] == ["name"]


def test_definition_for_finds_the_served_kinds() -> None:
    assert schema.definition_for("v1", "Pod") == CORE + "Pod"
    assert schema.definition_for("coordination.k8s.io/v1", "Lease") == (
        "io.k8s.api.coordination.v1.Lease")
    assert schema.definition_for("v1", "Nope") is None


def test_every_ref_resolves() -> None:
    refs = set(re.findall(r'"#/definitions/([^"]+)"', DATA_TEXT))
    assert refs
    assert refs <= set(schema.definitions())


@pytest.mark.parametrize("path", [
    "Container.dynamicVolumePolicy", "ContainerDynamicVolumePolicy",
    "ContainerDynamicVolumePolicy.restartPolicy", "PodStatus.volumeStatuses",
    "PodVolumeStatus", "PodVolumeStatus.name", "PodVolumeStatus.hostPhase",
    "PodVolumeStatus.errorMessage", "ContainerStatus.volumeMounts", "PodSpec.resources",
    "Pod", "Pod.metadata", "Pod.spec", "Pod.status", "PodSpec.containers", "PodSpec.volumes",
    "Container.volumeMounts", "Container.resources", "PodStatus.phase",
    "PodStatus.containerStatuses", "PodStatus.conditions",
])
def test_descriptions_of_kep_and_common_fields(path: str) -> None:
    type_name, _, field = path.partition(".")
    node = schema.definition(CORE + type_name)
    if field:
        node = node["properties"][field]
    assert len(node.get("description", "")) > 10


def test_every_kind_root_is_described() -> None:
    for name, node in schema.definitions().items():
        if node.get("x-kubernetes-group-version-kind") and (
                name.startswith("io.k8s.api.")):
            assert node.get("description"), name


# Sentences of the upstream field documentation: none may appear in what we serve.
UPSTREAM_SENTENCES = [
    "Pod is a collection of containers that can run on a host.",
    "List of containers belonging to the pod.",
    "Containers cannot currently be added or removed.",
    "Name must be unique within a namespace.",
    "Map of string keys and values that can be used to organize and categorize",
    "APIVersion defines the versioned schema of this representation of an object.",
    "Kind is a string value representing the REST resource this object represents.",
    "Quantity is a fixed-point representation of a number.",
    "IntOrString is a type that can hold an int32 or a string.",
    "Compute Resources required by this container.",
    "Statuses of containers in this pod.",
    "VolumeMountStatus shows status of volume mounts.",
]


@pytest.mark.parametrize("sentence", UPSTREAM_SENTENCES)
def test_upstream_prose_is_not_copied(sentence: str) -> None:
    assert sentence not in DATA_TEXT


def test_no_description_shares_a_long_run_of_words_with_upstream() -> None:
    """Checked against the fingerprints of the upstream prose the repository keeps (written
    by `gen_schema.py --from-upstream`): no 5-word run of a description is in the upstream
    description of the same field, no 7-word run anywhere in the upstream definitions."""
    upstream = gen_schema.load_fingerprints()
    ours = gen_schema.descriptions(schema.definitions())
    assert len(ours) > 150
    assert len(upstream["definitions_runs7"]) > 10000
    assert len(upstream["paths_runs5"]) > 10000
    for path, text in ours.items():
        same_field = gen_schema.fingerprints(f"{path}\n{run}"
                                             for run in gen_schema.word_runs(text, 5))
        assert not same_field & upstream["paths_runs5"], path
        anywhere = gen_schema.fingerprints(gen_schema.word_runs(text, 7))
        assert not anywhere & upstream["definitions_runs7"], path


def test_the_prose_check_catches_upstream_words() -> None:
    """The fingerprints hold upstream's runs: a description that copies upstream's words for
    `Pod.spec` (which the closure keeps) is caught by both checks."""
    upstream = gen_schema.load_fingerprints()
    copied = "specification of the desired behavior of the pod"
    path = f"/{CORE}Pod/properties/spec"
    assert gen_schema.fingerprints(f"{path}\n{run}" for run in
                                   gen_schema.word_runs(copied, 5)) & upstream["paths_runs5"]
    assert gen_schema.fingerprints(gen_schema.word_runs(copied, 7)) & upstream[
        "definitions_runs7"]


def test_generator_reproduces_the_data_file() -> None:
    """The served schema is what the generator makes of the closure the repository keeps."""
    built = gen_schema.build(gen_schema.load_closure())
    assert json.dumps(built, indent=1, sort_keys=True) + "\n" == DATA_TEXT


def test_generator_runs_as_a_script_help_free() -> None:
    # The module imports cleanly without side effects (main() only runs as __main__).
    result = subprocess.run(
        [sys.executable, "-c", "import runpy; runpy.run_path("
         f"{str(REPO / 'scripts' / 'gen_schema.py')!r}, run_name='x')"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
