"""Derive the schema ephemera serves from the upstream Kubernetes OpenAPI v2 document, in two
steps, so that a clone of the repository can re-derive and check everything without the
upstream document:

1. `--from-upstream SOURCE` (the upstream document, e.g. the reference data
   ../shared/data/kubernetes-openapi-v2.json; see its README) writes what the repository keeps
   of it, under scripts/data/:
   - `openapi-v2-closure.json`: the definitions reachable from the kinds ephemera serves,
     without the upstream prose (types, list-map keys, patch strategies, GVKs);
   - `upstream-prose-fingerprints.json.gz`: hashes of the upstream descriptions' word runs
     (`prose_fingerprints`), against which the tests check that ephemera's descriptions are
     its own words; no upstream prose is kept.
2. Always: from the closure, add the API fields of KEP-6395 (`Container.dynamicVolumePolicy`,
   `PodStatus.volumeStatuses`) and the descriptions ephemera serves (our own words,
   `DESCRIPTIONS` below), and write src/ephemera/api/data/definitions.json atomically.

Run: `python scripts/gen_schema.py [--from-upstream SOURCE]`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "scripts" / "data"
CLOSURE = DATA / "openapi-v2-closure.json"
FINGERPRINTS = DATA / "upstream-prose-fingerprints.json.gz"
TARGET = ROOT / "src" / "ephemera" / "api" / "data" / "definitions.json"

CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
ROOTS = [
    CORE + k
    for k in ("Namespace", "Pod", "ConfigMap", "Secret", "ServiceAccount", "Node", "Event",
              "ResourceQuota", "LimitRange", "Binding", "Service", "Endpoints")
] + ["io.k8s.api.coordination.v1.Lease", "io.k8s.api.discovery.v1.EndpointSlice"]
ROOTS += ["io.k8s.api.rbac.v1." + k
          for k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
ROOTS += ["io.k8s.api.authorization.v1." + k
          for k in ("SelfSubjectAccessReview", "SubjectAccessReview",
                    "LocalSubjectAccessReview", "SelfSubjectRulesReview")]
ROOTS += ["io.k8s.api.authentication.v1." + k
          for k in ("TokenRequest", "TokenReview", "SelfSubjectReview")]
ROOTS += ["io.k8s.api.certificates.v1.CertificateSigningRequest"]
# Workloads (apps/v1, core/v1 ReplicationController) and the autoscaling/v1 Scale of their
# `scale` subresource (custom resources' `scale` too).
ROOTS += ["io.k8s.api.apps.v1." + k
          for k in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision")]
ROOTS += [CORE + "ReplicationController", "io.k8s.api.autoscaling.v1.Scale"]
ROOTS += ["io.k8s.api.batch.v1." + k for k in ("Job", "CronJob")]
ROOTS += ["io.k8s.api.storage.v1.CSIStorageCapacity"]
ROOTS += ["io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService"]
ROOTS += ["io.k8s.api.networking.v1." + k for k in ("NetworkPolicy", "Ingress")]
ROOTS += ["io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1." + k
          for k in ("CustomResourceDefinition", "CustomResourceDefinitionList")]
EXTRA = [META + k for k in ("Status", "DeleteOptions", "WatchEvent", "APIResourceList", "Patch")]

# --- KEP-6395 API additions (the KEP's "API Changes" section) ------------------------------

KEP_DEFINITIONS: dict[str, dict[str, Any]] = {
    CORE + "ContainerDynamicVolumePolicy": {
        "type": "object",
        "properties": {"restartPolicy": {"type": "string"}},
    },
    CORE + "PodVolumeStatus": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "hostPhase": {"type": "string"},
            "errorMessage": {"type": "string"},
        },
    },
}
KEP_PROPERTIES: dict[tuple[str, str], dict[str, Any]] = {
    (CORE + "Container", "dynamicVolumePolicy"): {
        "$ref": "#/definitions/" + CORE + "ContainerDynamicVolumePolicy",
    },
    (CORE + "PodStatus", "volumeStatuses"): {
        "type": "array",
        "items": {"$ref": "#/definitions/" + CORE + "PodVolumeStatus"},
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-patch-merge-key": "name",
        "x-kubernetes-patch-strategy": "merge",
    },
}

# --- Descriptions, written for ephemera ----------------------------------------------------
# Key "Type" describes a definition, "Type.field" one of its properties. "Type" is the last
# segment of the definition name (unique among the kept definitions; checked below).
# Fields without an entry here are served without a description.

_API_VERSION = "Group and version of this object's schema, as group/version (only v1 for core)."
_KIND = "The type of this object, in CamelCase; the server fills it in on replies."
_METADATA = "Standard object metadata: name, namespace, labels, annotations, versions."
_LIST_METADATA = "List metadata: the resourceVersion to watch from and the continue token."

DESCRIPTIONS: dict[str, str] = {
    # kinds
    "Pod": "A group of containers that run together on one node, sharing network and volumes.",
    "Pod.spec": "What the pod should run: containers, volumes, scheduling and resources.",
    "Pod.status": "What is currently observed of the pod; written by the kubelet.",
    "PodList": "A list of pods.",
    "Namespace": "A named scope that holds namespaced objects; deleting it deletes its content.",
    "Namespace.spec": "Finalizers that must finish before the namespace is removed.",
    "Namespace.status": "The namespace's phase (Active or Terminating) and conditions.",
    "NamespaceList": "A list of namespaces.",
    "ConfigMap": "Non-secret configuration data, as string or binary values under keys.",
    "ConfigMapList": "A list of config maps.",
    "Secret": "Sensitive data (credentials, keys, tokens) stored under keys.",
    "SecretList": "A list of secrets.",
    "ServiceAccount": "An identity for processes that run in pods.",
    "ServiceAccountList": "A list of service accounts.",
    "Node": "A machine that runs pods, reported and kept alive by its kubelet.",
    "Node.spec": "How the node is configured: taints, unschedulable, pod CIDRs.",
    "Node.status": "What the kubelet reports of the node: capacity, conditions, addresses.",
    "NodeList": "A list of nodes.",
    "Event": "A report of something that happened to an object, for people to read.",
    "EventList": "A list of events.",
    "ResourceQuota": "Limits on the total resources and object counts of one namespace.",
    "ResourceQuota.spec": "The limits this quota enforces.",
    "ResourceQuota.status": "The enforced limits and what the namespace currently uses.",
    "ResourceQuotaList": "A list of resource quotas.",
    "LimitRange": "Per-object minimums, maximums and defaults for resources in a namespace.",
    "LimitRange.spec": "The limits this object enforces.",
    "LimitRangeList": "A list of limit ranges.",
    "Binding": "Assigns a pod to a node; posted to the pod's binding subresource.",
    "Binding.target": "The node the pod is bound to.",
    "Lease": "A lease: who holds a lock and until when, for leader election and heartbeats.",
    "Lease.spec": "The holder and the timing of the lease.",
    "LeaseList": "A list of leases.",
    "Status": "The result of a call that returns no object, or the detail of a failure.",
    "Status.code": "The HTTP status code of the result.",
    "Status.message": "A human-readable account of the result.",
    "Status.reason": "A machine-readable CamelCase word for the failure, such as NotFound.",
    "Status.status": "Either Success or Failure.",
    "Status.details": "The object the failure is about and the fields at fault.",
    "DeleteOptions": "Options of a delete request.",
    "DeleteOptions.gracePeriodSeconds": "Seconds to wait before deleting; 0 deletes at once.",
    "DeleteOptions.propagationPolicy": "Orphan, Background or Foreground deletion of dependents.",
    "DeleteOptions.preconditions": "Delete only if the object still has this uid or version.",
    "DeleteOptions.dryRun": "With All, check the request without persisting anything.",
    "WatchEvent": "One event of a watch stream: its type and the object.",
    "WatchEvent.type": "ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.",
    "WatchEvent.object": "The object after the change; for ERROR, a Status.",
    "Patch": "The body of a PATCH request, in the format its Content-Type names.",
    # metadata
    "ObjectMeta": "Metadata every persisted object carries.",
    "ObjectMeta.name": "The object's name, unique in its namespace for its kind.",
    "ObjectMeta.generateName": (
        "A prefix from which the server builds a unique name when name is empty."),
    "ObjectMeta.namespace": "The namespace the object lives in; empty for cluster-wide kinds.",
    "ObjectMeta.uid": "A server-assigned identifier, never reused for another object.",
    "ObjectMeta.resourceVersion": (
        "An opaque token that changes on every write; used for optimistic concurrency and as "
        "the starting point of watches."),
    "ObjectMeta.generation": "A counter the server increases when the desired state changes.",
    "ObjectMeta.creationTimestamp": "When the server created the object (RFC 3339, UTC).",
    "ObjectMeta.deletionTimestamp": (
        "When the object will be removed; set by a graceful delete, read-only."),
    "ObjectMeta.deletionGracePeriodSeconds": (
        "The grace period in seconds that the pending deletion was given."),
    "ObjectMeta.labels": "Key/value pairs for selecting and grouping objects.",
    "ObjectMeta.annotations": "Key/value pairs for tools and people; not used for selection.",
    "ObjectMeta.ownerReferences": "The objects this one depends on, for garbage collection.",
    "ObjectMeta.finalizers": "Names of cleanups that must finish before the object goes away.",
    "ObjectMeta.managedFields": "Which field manager set which fields (server-side apply).",
    "ListMeta": "Metadata of a list.",
    "ListMeta.resourceVersion": "The version of the list; a watch from it misses nothing.",
    "ListMeta.continue": "Set when more items remain; pass it back to get the next page.",
    "ListMeta.remainingItemCount": "How many items are left after this page, when known.",
    "Time": "A point in time, RFC 3339 in UTC with seconds precision.",
    "MicroTime": "A point in time, RFC 3339 in UTC with microseconds precision.",
    "Quantity": (
        "An exact amount, such as 100m, 1.5, 64Mi or 2Gi: a decimal number with an optional "
        "binary (Ki, Mi, Gi...) or decimal (m, k, M, G...) suffix."),
    "IntOrString": "Accepts a whole number or a text value (like a port number or name).",
    # pod spec
    "PodSpec": "The desired state of a pod.",
    "PodSpec.containers": (
        "The pod's main containers, at least one, identified by name. Through the /dynamic "
        "subresource containers can be added to and removed from a running pod."),
    "PodSpec.initContainers": "Containers that run to completion, in order, before the others.",
    "PodSpec.ephemeralContainers": "Containers added later for debugging; never restarted.",
    "PodSpec.volumes": (
        "Volumes the containers can mount, identified by name. Through the /dynamic "
        "subresource node-local volumes (configMap, secret, projected, emptyDir, image) can "
        "be added to and removed from a running pod."),
    "PodSpec.nodeName": "The node the pod runs on; set when the pod is bound.",
    "PodSpec.nodeSelector": "Node labels required of any node that gets this pod.",
    "PodSpec.restartPolicy": "When to restart containers that exit: Always, OnFailure or Never.",
    "PodSpec.terminationGracePeriodSeconds": (
        "Seconds the containers get to stop after the pod is deleted; 30 if unset."),
    "PodSpec.activeDeadlineSeconds": "After this many seconds from its start the pod is failed.",
    "PodSpec.serviceAccountName": "The service account the pod runs as.",
    "PodSpec.schedulerName": "The scheduler responsible for placing the pod.",
    "PodSpec.tolerations": "Taints of nodes this pod accepts.",
    "PodSpec.affinity": "Rules that attract the pod to, or repel it from, nodes and pods.",
    "PodSpec.securityContext": "Security settings applied to every container of the pod.",
    "PodSpec.hostNetwork": "Run in the node's network namespace.",
    "PodSpec.priority": "The pod's priority, derived from priorityClassName.",
    "PodSpec.priorityClassName": "The name of the priority class of the pod.",
    "PodSpec.overhead": "Resources the pod's sandbox uses beyond its containers.",
    "PodSpec.imagePullSecrets": "Secrets holding credentials for pulling the images.",
    "PodSpec.dnsPolicy": "How the pod's DNS is set up; ClusterFirst if unset.",
    "PodSpec.hostname": "The pod's hostname; the pod name if unset.",
    "PodSpec.resources": (
        "Requests and limits for the pod as a whole, shared by all its containers. Supported "
        "names: cpu, memory, hugepages-<size> and, with the PodLevelResourcesEphemeralStorage "
        "feature gate, ephemeral-storage (the pod's total of container writable layers, logs "
        "and disk-backed emptyDir volumes)."),
    # containers
    "Container": "One container of a pod: an image, how to run it and what it may use.",
    "Container.name": "The container's name, unique in the pod (a DNS label).",
    "Container.image": "The container image to run.",
    "Container.imagePullPolicy": "Always, Never or IfNotPresent: when to pull the image.",
    "Container.command": "The entrypoint, replacing the image's; not run in a shell.",
    "Container.args": "Arguments to the entrypoint, replacing the image's.",
    "Container.workingDir": "The working directory; the image's if unset.",
    "Container.env": "Variables added to the environment of the container's processes.",
    "Container.envFrom": "Sources (config maps, secrets) of many environment variables.",
    "Container.ports": "Ports the container listens on; informational.",
    "Container.resources": (
        "The container's requests and limits, keyed by resource name (cpu, memory, "
        "ephemeral-storage, ...)."),
    "Container.resizePolicy": "Whether resizing a resource in place restarts the container.",
    "Container.restartPolicy": "For init containers only: Always makes it a sidecar.",
    "Container.volumeMounts": (
        "Volumes of the pod mounted into this container, identified by mountPath."),
    "Container.livenessProbe": "A check that restarts the container when it fails.",
    "Container.readinessProbe": "A check that marks the container ready for traffic.",
    "Container.startupProbe": "A check that must pass before the other probes start.",
    "Container.lifecycle": "Actions run right after start and right before stop.",
    "Container.securityContext": "Security settings of this container.",
    "Container.terminationMessagePath": "The file the container writes its exit message to.",
    "Container.terminationMessagePolicy": "File, or FallbackToLogsOnError.",
    "Container.stdin": "Keep a stdin buffer open for the container.",
    "Container.tty": "Allocate a terminal for the container.",
    "Container.dynamicVolumePolicy": (
        "How this container reacts when its volume mounts are changed through the pod's "
        "/dynamic subresource while it runs (KEP-6395, feature gate "
        "DynamicNodeLocalEphemeralVolumes). Without it, mounts can only arrive with a new "
        "container and leave with a removed one."),
    "ContainerDynamicVolumePolicy": (
        "Policy for changes to a running container's volume mounts made through /dynamic."),
    "ContainerDynamicVolumePolicy.restartPolicy": (
        "RestartContainer: mounts of the running container may be added or removed, and the "
        "kubelet recreates the container in place to apply them. NotRequired (ephemera's "
        "preview of the KEP's next milestone, feature gate DynamicVolumeHotPlug): mounts may "
        "be added or removed, and the kubelet attaches and detaches them inside the running "
        "container without restarting it. Empty (the default): such changes are rejected "
        "while the container runs."),
    "VolumeMount": "A volume of the pod mounted at a path in a container.",
    "VolumeMount.name": "The name of the pod volume to mount.",
    "VolumeMount.mountPath": "Where in the container the volume appears; unique per container.",
    "VolumeMount.readOnly": "Mount read-only when true.",
    "VolumeMount.subPath": "Mount only this path inside the volume.",
    "VolumeMount.subPathExpr": "Like subPath, with $(VAR) expanded from the environment.",
    "VolumeMount.mountPropagation": "How mounts propagate between host and container.",
    "VolumeMount.recursiveReadOnly": "Whether a read-only mount is read-only all the way down.",
    "ContainerPort": "A port a container listens on.",
    "EnvVar": "One environment variable: a literal value or a reference.",
    "EnvVar.name": "The variable's name.",
    "EnvVar.value": "The literal value; $(VAR) references are expanded.",
    "EnvVar.valueFrom": "Take the value from a field, resource, config map or secret.",
    "ResourceRequirements": "Resource requests and limits, keyed by resource name.",
    "ResourceRequirements.requests": (
        "The amounts reserved when scheduling (cpu, memory, ephemeral-storage, ...)."),
    "ResourceRequirements.limits": (
        "The most that may be used (cpu, memory, ephemeral-storage, ...); exceeding "
        "ephemeral-storage gets the pod evicted."),
    "ResourceRequirements.claims": "Names of the pod's resource claims this entity uses.",
    # volumes
    "Volume": "A named volume of a pod, with exactly one source.",
    "Volume.name": "The volume's name, unique in the pod (a DNS label).",
    "Volume.configMap": "Files made from the keys of a config map.",
    "Volume.secret": "Files made from the keys of a secret, on memory-backed storage.",
    "Volume.emptyDir": "A directory that starts empty and lives as long as the pod uses it.",
    "Volume.projected": "Files from several sources (secrets, config maps, tokens) in one dir.",
    "Volume.image": "The content of an OCI image or artifact, mounted read-only.",
    "Volume.hostPath": "A file or directory of the node; not allowed through /dynamic.",
    "Volume.persistentVolumeClaim": "A persistent volume claimed in the pod's namespace.",
    "Volume.downwardAPI": "Files holding fields of the pod itself.",
    "EmptyDirVolumeSource": "An empty directory for the pod.",
    "EmptyDirVolumeSource.medium": "Empty for the node's disk, or Memory for a tmpfs.",
    "EmptyDirVolumeSource.sizeLimit": (
        "The most the volume may hold; beyond it the pod is evicted."),
    "ConfigMapVolumeSource": "Files made from a config map.",
    "ConfigMapVolumeSource.name": "The config map's name.",
    "ConfigMapVolumeSource.items": "Which keys to use and the file paths to put them at.",
    "ConfigMapVolumeSource.defaultMode": "The permission bits of the files; 0644 if unset.",
    "ConfigMapVolumeSource.optional": "Start the pod even if the config map is missing.",
    "SecretVolumeSource": "Files made from a secret.",
    "SecretVolumeSource.secretName": "The secret's name.",
    "SecretVolumeSource.items": "Which keys to use and the file paths to put them at.",
    "SecretVolumeSource.defaultMode": "The permission bits of the files; 0644 if unset.",
    "SecretVolumeSource.optional": "Start the pod even if the secret is missing.",
    "ProjectedVolumeSource": "Several sources projected into one directory.",
    "ProjectedVolumeSource.sources": "The sources to project.",
    "ImageVolumeSource": "An OCI image or artifact as a read-only volume.",
    "ImageVolumeSource.reference": "The image reference to mount.",
    "ImageVolumeSource.pullPolicy": "Always, Never or IfNotPresent: when to pull it.",
    "KeyToPath": "One key of a config map or secret and the file it goes to.",
    # pod status
    "PodStatus": "The observed state of a pod.",
    "PodStatus.phase": "Pending, Running, Succeeded, Failed or Unknown.",
    "PodStatus.conditions": "The pod's conditions, such as PodScheduled and Ready.",
    "PodStatus.message": "An explanation, for people, of the current phase.",
    "PodStatus.reason": "A CamelCase word that explains the current phase, such as Evicted.",
    "PodStatus.hostIP": "Primary address of the node running this pod.",
    "PodStatus.podIP": "The pod's IP address.",
    "PodStatus.podIPs": "The pod's IP addresses, the first equal to podIP.",
    "PodStatus.startTime": "When the kubelet accepted the pod.",
    "PodStatus.qosClass": "Guaranteed, Burstable or BestEffort, from the resources asked for.",
    "PodStatus.containerStatuses": "The state of each main container.",
    "PodStatus.initContainerStatuses": "The state of each init container.",
    "PodStatus.ephemeralContainerStatuses": "The state of each ephemeral container.",
    "PodStatus.nominatedNodeName": "A node the pod may run on once preemption completes.",
    "PodStatus.observedGeneration": "The pod generation this status was written for.",
    "PodStatus.volumeStatuses": (
        "Per volume of the pod, keyed by name: whether the kubelet has admitted it and "
        "prepared it on the node (KEP-6395). Mounts inside containers are reported in "
        "containerStatuses[].volumeMounts."),
    "PodVolumeStatus": "The node-side state of one pod volume.",
    "PodVolumeStatus.name": "The volume's name in spec.volumes.",
    "PodVolumeStatus.hostPhase": (
        "Pending (not yet admitted or prepared), HostMounted (ready on the node), "
        "ErrorMounting (preparing it failed) or Unmounting (its removal was admitted and "
        "teardown is under way)."),
    "PodVolumeStatus.errorMessage": "What went wrong while preparing the volume on the node.",
    "PodCondition": "One condition of a pod.",
    "PodCondition.type": "The condition's name, such as Ready or PodScheduled.",
    "PodCondition.status": "True, False or Unknown.",
    "PodCondition.reason": "A CamelCase word for the last transition.",
    "PodCondition.message": "The last transition, for people.",
    "PodCondition.lastTransitionTime": "When status last changed.",
    "PodCondition.lastProbeTime": "When the condition was last checked.",
    "ContainerStatus": "The observed state of one container.",
    "ContainerStatus.name": "The container's name.",
    "ContainerStatus.ready": "Whether the container passes its readiness check.",
    "ContainerStatus.started": "Whether the container has started and passed its startup check.",
    "ContainerStatus.restartCount": "The number of restarts of this container so far.",
    "ContainerStatus.image": "The image the container runs.",
    "ContainerStatus.imageID": "The resolved image the container runs.",
    "ContainerStatus.containerID": "The runtime's id of the container, as <runtime>://<id>.",
    "ContainerStatus.state": "What the container is doing now.",
    "ContainerStatus.lastState": "How the previous run of the container ended.",
    "ContainerStatus.allocatedResources": "The resources the node has allocated to it.",
    "ContainerStatus.resources": "The resources actually configured for it.",
    "ContainerStatus.volumeMounts": (
        "The mounts actually in place in the running container; KEP-6395 reads a mount "
        "change as applied once it shows here."),
    "VolumeMountStatus": "A mount in place in a running container.",
    "VolumeMountStatus.name": "The name of the mounted volume.",
    "VolumeMountStatus.mountPath": "Where it is mounted in the container.",
    "VolumeMountStatus.readOnly": "Whether it is mounted read-only.",
    "VolumeMountStatus.recursiveReadOnly": "Whether read-only applies all the way down.",
    "ContainerState": "Exactly one of waiting, running or terminated.",
    "ContainerState.waiting": "The container has not started yet.",
    "ContainerState.running": "The container is running.",
    "ContainerState.terminated": "The container has exited.",
    "ContainerStateWaiting": "A container that is not running yet.",
    "ContainerStateWaiting.reason": (
        "Why it waits, such as ContainerCreating, ImagePullBackOff or Unallocated."),
    "ContainerStateWaiting.message": "Why it waits, for people.",
    "ContainerStateRunning": "A running container.",
    "ContainerStateRunning.startedAt": "When it started.",
    "ContainerStateTerminated": "A container that has exited.",
    "ContainerStateTerminated.exitCode": "Its exit code.",
    "ContainerStateTerminated.signal": "The signal that ended it, if any.",
    "ContainerStateTerminated.reason": "A CamelCase word for why it ended.",
    "ContainerStateTerminated.message": "Why it ended, for people.",
    "ContainerStateTerminated.startedAt": "When it started.",
    "ContainerStateTerminated.finishedAt": "When it ended.",
    "ContainerStateTerminated.containerID": "The runtime's id of the container.",
    # config maps, secrets, service accounts
    "ConfigMap.data": "String values by key.",
    "ConfigMap.binaryData": "Binary values by key, base64 in JSON.",
    "ConfigMap.immutable": "When true, data can no longer be changed.",
    "Secret.data": "Values by key, base64 in JSON.",
    "Secret.stringData": "Plain-text values by key, merged into data on write; never read back.",
    "Secret.type": "What the secret holds, such as Opaque or kubernetes.io/tls.",
    "Secret.immutable": "When true, data can no longer be changed.",
    "ServiceAccount.secrets": "Secrets that pods running as this account may use.",
    "ServiceAccount.imagePullSecrets": "Image pull secrets added to pods of this account.",
    "ServiceAccount.automountServiceAccountToken": "Whether pods get an API token mounted.",
    # nodes
    "NodeSpec": "The configuration of a node.",
    "NodeSpec.taints": "Taints that keep pods away unless they tolerate them.",
    "NodeSpec.unschedulable": "When true, no new pods are placed on the node.",
    "NodeSpec.podCIDR": "The IP range for the node's pods.",
    "NodeSpec.providerID": "The node's id at its infrastructure provider.",
    "NodeStatus": "The observed state of a node.",
    "NodeStatus.capacity": "The node's total resources (cpu, memory, ephemeral-storage, pods).",
    "NodeStatus.allocatable": "The resources available to pods after system reservations.",
    "NodeStatus.conditions": "The node's conditions, such as Ready and DiskPressure.",
    "NodeStatus.addresses": "The node's addresses: hostname, internal and external IPs.",
    "NodeStatus.nodeInfo": "Versions and ids of the node's system and software.",
    "NodeStatus.daemonEndpoints": "Where the kubelet listens.",
    "NodeCondition": "One condition of a node.",
    "Taint": "A mark on a node that repels pods without a matching toleration.",
    "Toleration": "Lets a pod be placed on (or stay on) nodes with a matching taint.",
    # events
    "Event.involvedObject": "The object the event is about.",
    "Event.reason": "A short CamelCase word for what happened.",
    "Event.message": "What happened, for people.",
    "Event.type": "Normal or Warning.",
    "Event.count": "How many times this event has happened.",
    "Event.firstTimestamp": "When it first happened.",
    "Event.lastTimestamp": "When it last happened.",
    "Event.source": "The component and host that reported it.",
    "Event.eventTime": "When it happened, with microseconds.",
    "Event.reportingComponent": "The controller that reported it.",
    "Event.reportingInstance": "The instance of that controller.",
    "ObjectReference": "A reference to an object, by kind, namespace, name and uid.",
    # quota and limits
    "ResourceQuotaSpec.hard": "The most each named resource may total in the namespace.",
    "ResourceQuotaSpec.scopes": "Only objects matching all these scopes are counted.",
    "ResourceQuotaStatus.hard": "The limits being enforced.",
    "ResourceQuotaStatus.used": "What the namespace uses now, by resource.",
    "LimitRangeSpec.limits": "The limits, one entry per kind of object.",
    "LimitRangeItem": "Limits for one kind of object: Pod, Container or PersistentVolumeClaim.",
    "LimitRangeItem.type": "Pod, Container or PersistentVolumeClaim.",
    "LimitRangeItem.max": "The most each resource may be.",
    "LimitRangeItem.min": "The least each resource may be.",
    "LimitRangeItem.default": "The limit set when none is given.",
    "LimitRangeItem.defaultRequest": "The request set when none is given.",
    "LimitRangeItem.maxLimitRequestRatio": "The largest allowed limit-to-request ratio.",
    # leases
    "LeaseSpec.holderIdentity": "Who holds the lease.",
    "LeaseSpec.leaseDurationSeconds": "How long the holder keeps it without renewing.",
    "LeaseSpec.acquireTime": "When the holder took it.",
    "LeaseSpec.renewTime": "When the holder last renewed it.",
    "LeaseSpec.leaseTransitions": "How many times it has changed hands.",
    # authentication and certificates
    "TokenRequest": "Asks for a signed token of a service account; posted to its token "
                    "subresource, never stored.",
    "TokenRequestSpec.audiences": "Who the token is for; the apiserver's audiences if empty.",
    "TokenRequestSpec.expirationSeconds": "How long the token lasts; 3600 if unset, at "
                                          "least 600.",
    "TokenRequestSpec.boundObjectRef": "A Pod, Secret or Node the token lives and dies with.",
    "TokenRequestStatus.token": "The signed token (a JWT).",
    "TokenRequestStatus.expirationTimestamp": "When the token expires.",
    "TokenReview": "Asks whether a bearer token is valid and whose it is; never stored.",
    "TokenReviewStatus.authenticated": "Whether the token is valid.",
    "TokenReviewStatus.user": "The user the token authenticates as.",
    "SelfSubjectReview": "Asks who the caller is authenticated as (kubectl auth whoami).",
    "SelfSubjectReviewStatus.userInfo": "The caller's user name, uid, groups and extras.",
    "CustomResourceDefinition": "A new resource kind this server is to serve: its group, "
                                "names, scope, versions and each version's schema.",
    "CertificateSigningRequest": "A request for a certificate signed by a named signer, "
                                 "approved or denied, then issued.",
    "CertificateSigningRequestList": "A list of certificate signing requests.",
    "CertificateSigningRequestSpec.request": "The PEM-encoded PKCS#10 request.",
    "CertificateSigningRequestSpec.signerName": (
        "Who signs it, e.g. kubernetes.io/kube-apiserver-client-kubelet."),
    "CertificateSigningRequestSpec.username": "Who asked; set by the server.",
    "CertificateSigningRequestStatus.certificate": "The issued certificate, PEM-encoded.",
    "CertificateSigningRequestStatus.conditions": "Approved, Denied or Failed.",
    # RBAC and access reviews
    "Role": "Rules of access to the resources of one namespace, for bindings to grant.",
    "RoleList": "A list of roles.",
    "ClusterRole": "Rules of access cluster-wide (or, bound by a RoleBinding, in one "
                   "namespace); with an aggregationRule, the union of the roles it selects.",
    "ClusterRoleList": "A list of cluster roles.",
    "RoleBinding": "Grants a Role or ClusterRole to users, groups or service accounts within "
                   "one namespace.",
    "RoleBindingList": "A list of role bindings.",
    "ClusterRoleBinding": "Grants a ClusterRole to users, groups or service accounts in every "
                          "namespace.",
    "ClusterRoleBindingList": "A list of cluster role bindings.",
    "PolicyRule": "Verbs allowed on resources of API groups (optionally by name), or on "
                  "non-resource URLs.",
    "Subject": "Who a binding grants to: a User, Group or ServiceAccount.",
    "RoleRef": "The role a binding grants; it cannot change once the binding exists.",
    "AggregationRule": "Selectors of the cluster roles whose rules this role takes.",
    "SelfSubjectAccessReview": "Asks whether the requesting user may do one thing; the answer "
                               "is in status.",
    "SubjectAccessReview": "Asks whether a given user may do one thing; the answer is in "
                           "status.",
    "LocalSubjectAccessReview": "A SubjectAccessReview within one namespace.",
    "SelfSubjectRulesReview": "Lists what the requesting user may do in a namespace; the rules "
                              "are in status.",
    # Services and their endpoints
    "Service": "A stable virtual address and name in front of the pods its selector picks.",
    "Service.spec": "The ports, selector, type and cluster IPs of the service.",
    "Service.status": "What is observed of the service: load balancer ingress, conditions.",
    "ServiceList": "A list of services.",
    "ServiceSpec.clusterIP": "The virtual IP; allocated from the service range when empty, "
                             "None for a headless service.",
    "ServiceSpec.ports": "The ports the service answers on and where each one leads.",
    "ServiceSpec.selector": "Labels of the pods that back the service.",
    "ServiceSpec.type": "ClusterIP, NodePort, LoadBalancer or ExternalName.",
    "ServicePort.targetPort": "The pod port, by number or by the name of a container port.",
    "ServicePort.nodePort": "The port opened on every node for a NodePort service.",
    "Endpoints": "The addresses and ports behind a service, the older form of "
                 "EndpointSlices.",
    "EndpointsList": "A list of endpoints objects.",
    "EndpointSlice": "A share of the addresses and ports behind one service.",
    "EndpointSliceList": "Endpoint slices, as a list request returns them.",
    "io.k8s.api.discovery.v1.Endpoint:conditions": "Whether this address is ready, serving, "
                                                   "terminating.",
    # Workloads
    "Deployment": "Keeps a number of pods of one template running and rolls them to a new "
                  "template through ReplicaSets.",
    "Deployment.spec": "The wanted pods: how many, their template, and how a rollout goes.",
    "Deployment.status": "What the deployment controller last saw of the rollout.",
    "DeploymentList": "A list of deployments.",
    "DeploymentSpec.replicas": "How many pods of the template to keep running (1 if unset).",
    "DeploymentSpec.selector": "The labels that pick this deployment's pods; it must match "
                               "the template's labels and cannot change once set.",
    "DeploymentSpec.template": "The pod every replica is made from; changing it starts a "
                               "rollout.",
    "DeploymentSpec.strategy": "How old pods give way to new ones in a rollout: all at once "
                               "(Recreate) or a few at a time (RollingUpdate, the default).",
    "DeploymentSpec.minReadySeconds": "Seconds a new pod must stay ready, none of its "
                                      "containers crashing, before it counts as available.",
    "DeploymentSpec.revisionHistoryLimit": "How many old ReplicaSets to keep for "
                                           "`kubectl rollout undo` (10 if unset).",
    "DeploymentSpec.paused": "While true, changes to the template start no rollout.",
    "DeploymentSpec.progressDeadlineSeconds": "Seconds a rollout may go without progress "
                                              "before the Progressing condition turns False "
                                              "(600 if unset).",
    "DeploymentStrategy.type": "Recreate (stop every old pod, then start the new ones) or "
                               "RollingUpdate (replace them gradually).",
    "DeploymentStrategy.rollingUpdate": "The limits of a RollingUpdate; only with that type.",
    "RollingUpdateDeployment.maxUnavailable": "How many of the wanted pods may be unavailable "
                                              "during a rollout: a count or a percentage, "
                                              "rounded down (25% if unset).",
    "RollingUpdateDeployment.maxSurge": "How many pods beyond the wanted number may exist "
                                        "during a rollout: a count or a percentage, rounded "
                                        "up (25% if unset).",
    "DeploymentStatus.replicas": "Pods of this deployment that exist, old and new.",
    "DeploymentStatus.updatedReplicas": "Pods made from the current template.",
    "DeploymentStatus.readyReplicas": "Pods whose Ready condition is True.",
    "DeploymentStatus.availableReplicas": "Pods that have stayed ready as long as "
                                          "minReadySeconds asks.",
    "DeploymentStatus.unavailableReplicas": "Wanted pods that are not available yet.",
    "DeploymentStatus.observedGeneration": "The generation of the spec the controller last "
                                           "acted on.",
    "DeploymentStatus.conditions": "Available and Progressing, with the reason of each.",
    "ReplicaSet": "Keeps a number of pods that match its selector running, made from its "
                  "template.",
    "ReplicaSet.spec": "How many pods, which ones count (selector), and the template.",
    "ReplicaSet.status": "The pods the replica set controller counted last.",
    "ReplicaSetList": "A list of replica sets.",
    "ReplicationController": "The core group's older form of a ReplicaSet, selecting pods "
                             "by a map of labels.",
    "ReplicationController.spec": "How many pods, their labels and their template.",
    "ReplicationController.status": "The pods the controller counted last.",
    "ReplicationControllerList": "A list of replication controllers.",
    "StatefulSet": "Runs pods with stable names and ordinals, created and removed in order.",
    "StatefulSet.spec": "How many pods, their template, order and update strategy.",
    "StatefulSet.status": "The pods the stateful set controller counted last.",
    "StatefulSetList": "A list of stateful sets.",
    "DaemonSet": "Runs one pod of its template on every eligible node.",
    "DaemonSet.spec": "The template, its selector and how its pods are replaced.",
    "DaemonSet.status": "How many nodes run the pod, and how many should.",
    "DaemonSetList": "A list of daemon sets.",
    "ControllerRevision": "A stored snapshot of a controller's template at one revision.",
    "ControllerRevisionList": "A list of controller revisions.",
    "PersistentVolumeClaim": "A request for storage; ephemera serves it only inside a "
                             "StatefulSet's volumeClaimTemplates.",
    "Scale": "The replica count of a scalable object, read and written through its scale "
             "subresource.",
    "Scale.spec": "The wanted number of replicas.",
    "Scale.status": "The observed number of replicas and the pods' selector as text.",
    # batch/v1
    "Job": "Runs pods until a number of them have succeeded, or gives up.",
    "Job.spec": "How many pods to run, how many at once, and when to give up.",
    "Job.status": "Counts of the job's pods and the job's conditions.",
    "JobList": "A list of jobs.",
    "JobSpec.completions": "How many pods must succeed for the job to complete.",
    "JobSpec.parallelism": "At most this many pods run at the same time.",
    "JobSpec.backoffLimit": "Failed pods tolerated before the job fails (default 6).",
    "JobSpec.activeDeadlineSeconds": "Seconds the job may run before it is failed.",
    "JobSpec.ttlSecondsAfterFinished": "Seconds after finishing before the job is deleted.",
    "JobSpec.completionMode": "NonIndexed, or Indexed: each pod gets its own index.",
    "JobSpec.suspend": "While true, no pods are started and running ones are stopped.",
    "JobSpec.selector": "The label query over the job's pods; generated unless manual.",
    "JobSpec.manualSelector": "Set the selector yourself instead of having one generated.",
    "JobSpec.template": "The pods the job creates.",
    "CronJob": "Starts jobs on a cron schedule.",
    "CronJob.spec": "The schedule and the job to start on it.",
    "CronJob.status": "The running jobs and when one was last started.",
    "CronJobList": "A list of cron jobs.",
    "CronJobSpec.schedule": "When to start a job, in cron format (five fields).",
    "CronJobSpec.timeZone": "Where the schedule is read: an IANA zone name such as Europe/Paris.",
    "CronJobSpec.concurrencyPolicy": "Allow, Forbid or Replace runs that would overlap.",
    "CronJobSpec.suspend": "While true, no new jobs are started.",
    "CronJobSpec.jobTemplate": "The job to start on each run.",
    "CSIStorageCapacity": "How much storage a CSI driver reports free for one storage class "
                          "in one part of the cluster (stored as data in ephemera).",
    "CSIStorageCapacity.storageClassName": "The storage class this capacity is for.",
    "CSIStorageCapacity.nodeTopology": "The nodes that reach this storage, by their labels.",
    "CSIStorageCapacity.capacity": "The free space the driver reported.",
    "CSIStorageCapacity.maximumVolumeSize": "The largest volume the driver can make there.",
    "CSIStorageCapacityList": "A list of CSI storage capacities.",
    "NetworkPolicy": "Which traffic the selected pods may receive and send (stored, not "
                     "enforced, in ephemera).",
    "NetworkPolicy.spec": "The pods selected and the traffic rules that apply to them.",
    "NetworkPolicyList": "A list of network policies.",
    "NetworkPolicySpec.podSelector": "The pods this policy applies to; empty selects all of "
                                     "the namespace.",
    "NetworkPolicySpec.ingress": "The traffic the selected pods may receive.",
    "NetworkPolicySpec.egress": "The traffic the selected pods may send.",
    "APIService": "Registers a group and version served by another server behind this one "
                  "(API aggregation; stored without effect in ephemera).",
    "APIService.spec": "The group, version, priorities and the Service that serves them.",
    "APIService.status": "Whether the API is available, as conditions.",
    "APIServiceList": "A list of API services.",
    "Ingress": "HTTP routes from outside the cluster to Services, by host and path (stored, "
               "not routed, in ephemera: no ingress controller runs).",
    "Ingress.spec": "The rules, default backend, TLS and class of the Ingress.",
    "Ingress.status": "The addresses its controller reported.",
    "IngressList": "A list of ingresses.",
    "IngressSpec.rules": "Host and path rules, each sending matching requests to a backend.",
    "IngressSpec.defaultBackend": "Where requests no rule matches go.",
    "IngressSpec.tls": "The hosts served over TLS and the Secrets holding their certificates.",
    "IngressSpec.ingressClassName": "The IngressClass whose controller implements it.",
    "NetworkPolicySpec.policyTypes": "Which directions the policy restricts: Ingress, Egress.",
}
# Fields every kind root has.
_COMMON_ROOT_FIELDS = {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": _METADATA}


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def _strip_prose(node: Any) -> Any:
    """Without the descriptions (strings; a property named `description`, as
    JSONSchemaProps has, is a schema and stays)."""
    if isinstance(node, dict):
        return {k: _strip_prose(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_prose(v) for v in node]
    return node


def closure(defs: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    keep: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = defs[name]
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(found - keep.keys())
    return keep


def add_kep_fields(defs: dict[str, Any]) -> None:
    """Add the KEP-6395 definitions and properties (the upstream document predates them)."""
    for name, node in KEP_DEFINITIONS.items():
        defs[name] = json.loads(json.dumps(node))
    for (owner, prop), node in KEP_PROPERTIES.items():
        defs[owner].setdefault("properties", {})[prop] = json.loads(json.dumps(node))


def add_descriptions(defs: dict[str, Any], roots: list[str]) -> None:
    # A description names its type by the short name, or by the full one where two groups
    # share it (core/v1 and discovery/v1 both have an EndpointPort).
    by_short: dict[str, str] = {}
    ambiguous: set[str] = set()
    for name in defs:
        short = name.rsplit(".", 1)[-1]
        if short in by_short:
            ambiguous.add(short)
        by_short[short] = name
        by_short[name] = name
    for root in roots:
        props = defs[root].get("properties", {})
        for field, text in (_COMMON_ROOT_FIELDS | {"metadata": _LIST_METADATA
                                                    if root.endswith("List") else _METADATA}
                            ).items():
            if field in props:
                props[field]["description"] = text
        if root.endswith("List") and "items" in props:
            props["items"]["description"] = "The objects of the list."
    for key, text in DESCRIPTIONS.items():
        type_name, _, field = (key.partition(":") if ":" in key else key.partition("."))
        if type_name in ambiguous:
            raise SystemExit(f"ambiguous short name {type_name} in description {key}")
        if type_name not in by_short:
            raise SystemExit(f"description for unknown type {type_name}")
        node = defs[by_short[type_name]]
        if field:
            if field not in node.get("properties", {}):
                raise SystemExit(f"description for unknown field {key}")
            node = node["properties"][field]
        node["description"] = text


def write_atomically(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prune(upstream: dict[str, Any]) -> dict[str, Any]:
    """What the repository keeps of the upstream definitions: those reachable from the served
    kinds, without their prose."""
    defs = upstream["definitions"]
    roots = ROOTS + [r + "List" for r in ROOTS if r + "List" in defs]
    return dict(sorted((k, _strip_prose(v)) for k, v in closure(defs, roots + EXTRA).items()))


def build(pruned: dict[str, Any]) -> dict[str, Any]:
    """The served definitions, from the pruned upstream ones (`prune`)."""
    kept = json.loads(json.dumps(pruned))
    roots = ROOTS + [r + "List" for r in ROOTS if r + "List" in kept]
    add_kep_fields(kept)
    add_descriptions(kept, roots)
    return dict(sorted(kept.items()))


# --- fingerprints of the upstream prose ----------------------------------------------------
# A word run is `n` consecutive words (lower case); its fingerprint the first 5 bytes of its
# BLAKE2b hash, in hex (with ~10^5 fingerprints, a chance match of one run is ~10^-7).

FINGERPRINT_BYTES = 5


def descriptions(node: Any, path: str = "") -> dict[str, str]:
    """Every `description` under `node`, by its JSON path (`/Type/properties/field`)."""
    out: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("description"), str):
                out[path] = node["description"]
            for key, value in node.items():
                walk(value, f"{path}/{key}")

    walk(node, path)
    return out


def word_runs(text: str, n: int) -> set[str]:
    words = re.findall(r"[\w'-]+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def fingerprint(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=FINGERPRINT_BYTES).hexdigest()


def fingerprints(runs: Iterable[str]) -> set[str]:
    return {fingerprint(run) for run in runs}


def prose_fingerprints(upstream: dict[str, Any], kept: Iterable[str]) -> dict[str, Any]:
    """What the description tests check against: the fingerprints of every 7-word run of the
    definitions' prose, of every 5-word run of each description of a kept definition prefixed
    by its path (`path + "\\n" + run`), and of every 6-word run of the parameters' prose."""
    kept = set(kept)
    texts = descriptions(upstream["definitions"])
    by_path = {path: text for path, text in texts.items()
               if path.split("/", 2)[1] in kept}
    return {
        "fingerprint": f"blake2b, first {FINGERPRINT_BYTES} bytes, hex",
        "definitions_runs7": sorted(fingerprints(
            run for text in texts.values() for run in word_runs(text, 7))),
        "paths_runs5": sorted(fingerprints(
            f"{path}\n{run}" for path, text in by_path.items() for run in word_runs(text, 5))),
        "parameters_runs6": sorted(fingerprints(
            run for p in upstream["parameters"].values()
            for run in word_runs(json.dumps(p.get("description", "")), 6))),
    }


def load_closure() -> dict[str, Any]:
    closure_: dict[str, Any] = json.loads(CLOSURE.read_text())
    return closure_


def load_fingerprints() -> dict[str, set[str]]:
    data = json.loads(gzip.decompress(FINGERPRINTS.read_bytes()))
    return {key: set(value) for key, value in data.items() if isinstance(value, list)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-upstream", type=Path, metavar="SOURCE",
                        help="refresh scripts/data/ from this upstream OpenAPI v2 document")
    args = parser.parse_args()
    if args.from_upstream is not None:
        upstream = json.loads(args.from_upstream.read_text())
        pruned = prune(upstream)
        write_atomically(CLOSURE, json.dumps(pruned, indent=1, sort_keys=True) + "\n")
        packed = json.dumps(prose_fingerprints(upstream, pruned), indent=0, sort_keys=True)
        write_atomically(FINGERPRINTS, gzip.compress(packed.encode(), mtime=0))
        print(f"wrote {len(pruned)} pruned definitions and the prose fingerprints to "
              f"{DATA.relative_to(ROOT)}")
    kept = build(load_closure())
    write_atomically(TARGET, json.dumps(kept, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(kept)} definitions to {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
