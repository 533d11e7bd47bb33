"""Generic field validation every kind uses, as `FieldError` lists with upstream's messages
and paths: apimachinery's `ValidateObjectMeta` / `ValidateObjectMetaUpdate` (plus the
kubernetes finalizer-name rule), label and annotation maps, DNS-1123 names, qualified names,
and the small `util/validation` string checks (port names, environment variable names,
config-map keys, numeric ranges, immutable fields).

The string-level checks (`IsDNS1123Label`, `IsQualifiedName`, ...) live in `ephemera.api.meta`;
this module turns them into field errors at the right paths. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ephemera.api import field, meta
from ephemera.api.deletion import FOREGROUND_FINALIZER, ORPHAN_FINALIZER
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_quote

__all__ = [
    "FIELD_IMMUTABLE",
    "IS_NEGATIVE",
    "MAX_INT32",
    "config_map_key_errors",
    "dns_label_name",
    "dns_subdomain_name",
    "env_var_name_errors",
    "finalizer_name_warnings",
    "inclusive_range_error",
    "kube_finalizer_name_errors",
    "port_name_errors",
    "port_num_errors",
    "validate_annotations",
    "validate_dns1123_label",
    "validate_dns1123_subdomain",
    "validate_finalizers",
    "validate_immutable_field",
    "validate_label_name",
    "validate_labels",
    "validate_nonnegative_field",
    "validate_object_meta",
    "validate_object_meta_update",
    "validate_qualified_name",
]

FIELD_IMMUTABLE = "field is immutable"
IS_NEGATIVE = "must be greater than or equal to 0"
MAX_INT32 = 2**31 - 1

# k/k `helper.IsStandardFinalizerName`
STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
NOT_FULLY_QUALIFIED = "name is neither a standard finalizer name nor is it fully qualified"
PREFER_QUALIFIED_FINALIZER = ("prefer a domain-qualified finalizer name including a path (/) "
                              "to avoid accidental conflicts with other finalizer writers")
_ORPHAN = ORPHAN_FINALIZER
_FOREGROUND = FOREGROUND_FINALIZER

NameFn = Callable[[str, bool], list[str]]


def _path(path: Path | str) -> Path:
    return path if isinstance(path, Path) else Path(path) if path else Path()


# --- string checks (apimachinery util/validation) ---------------------------------------


def inclusive_range_error(lo: int, hi: int) -> str:
    """`InclusiveRangeError`."""
    return f"must be between {lo} and {hi}, inclusive"


def port_num_errors(port: int) -> list[str]:
    """`IsValidPortNum`: 1..65535."""
    return [] if 1 <= port <= 65535 else [inclusive_range_error(1, 65535)]


_PORT_NAME_CHARSET = re.compile(r"[-a-z0-9]+")
_PORT_NAME_LETTER = re.compile(r"[a-z]")


def port_name_errors(name: str) -> list[str]:
    """`IsValidPortName` (an IANA_SVC_NAME)."""
    errs: list[str] = []
    if len(name) > 15:
        errs.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARSET.fullmatch(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_LETTER.search(name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def env_var_name_errors(name: str) -> list[str]:
    """`IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is GA and always on)."""
    errs: list[str] = []
    if not name:
        errs.append("environment variable name must be non-empty")
    for ch in name:
        if ord(ch) > 127 or not ch.isprintable() or ch == "=":
            errs.append(
                "a valid environment variable name must consist only of printable ASCII "
                "characters other than '='"
            )
            break
    return errs


_CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_MAP_KEY = re.compile(_CONFIG_MAP_KEY_FMT)


def config_map_key_errors(key: str) -> list[str]:
    """`IsConfigMapKey` (also used for secret keys)."""
    errs: list[str] = []
    if len(key) > meta.DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {meta.DNS1123_SUBDOMAIN_MAX} characters")
    if not _CONFIG_MAP_KEY.fullmatch(key):
        errs.append(meta.regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            _CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


# --- field-level checks -----------------------------------------------------------------


def validate_dns1123_label(value: str, path: Path | str) -> list[FieldError]:
    """`ValidateDNS1123Label`: `Invalid value: "X": a lowercase RFC 1123 label must ...`."""
    return [field.invalid(path, value, m) for m in meta.dns1123_label_errors(value)]


def validate_dns1123_subdomain(value: str, path: Path | str) -> list[FieldError]:
    """`ValidateDNS1123Subdomain`."""
    return [field.invalid(path, value, m) for m in meta.dns1123_subdomain_errors(value)]


def validate_qualified_name(value: str, path: Path | str) -> list[FieldError]:
    """`ValidateQualifiedName`."""
    return [field.invalid(path, value, m) for m in meta.qualified_name_errors(value)]


def validate_label_name(key: str, path: Path | str) -> list[FieldError]:
    """`ValidateLabelName`: the error sits on the map's path, the value is the key."""
    return validate_qualified_name(key, path)


def validate_labels(labels: Any, path: Path | str) -> list[FieldError]:
    """`ValidateLabels`: each key a qualified name, each value a label value; both errors
    sit on the map's own path (`metadata.labels`)."""
    errs: list[FieldError] = []
    if not labels:
        return errs
    if not isinstance(labels, Mapping):
        return [field.invalid(path, labels, "must be a map of strings")]
    for key, value in labels.items():
        errs.extend(validate_label_name(str(key), path))
        if not isinstance(value, str):
            errs.append(field.invalid(path, value, "must be a string"))
            continue
        errs.extend(field.invalid(path, value, m) for m in meta.label_value_errors(value))
    return errs


def validate_annotations(annotations: Any, path: Path | str) -> list[FieldError]:
    """`ValidateAnnotations`: keys are qualified names once lower-cased; keys and values
    together at most 256 KiB (`Too long: may not be more than 262144 bytes`)."""
    errs: list[FieldError] = []
    if not annotations:
        return errs
    if not isinstance(annotations, Mapping):
        return [field.invalid(path, annotations, "must be a map of strings")]
    total = 0
    for key, value in annotations.items():
        key = str(key)
        errs.extend(field.invalid(path, key, m) for m in meta.qualified_name_errors(key.lower()))
        text = value if isinstance(value, str) else str(value)
        total += len(key.encode()) + len(text.encode())
    if total > meta.TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(field.too_long(path, meta.TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def validate_nonnegative_field(value: int, path: Path | str) -> list[FieldError]:
    """`ValidateNonnegativeField`: `Invalid value: -1: must be greater than or equal to 0`."""
    return [field.invalid(path, value, IS_NEGATIVE)] if value < 0 else []


def validate_immutable_field(new: Any, old: Any, path: Path | str) -> list[FieldError]:
    """`ValidateImmutableField`: `Invalid value: <new>: field is immutable`."""
    return [] if new == old else [field.invalid(path, new, FIELD_IMMUTABLE)]


def validate_finalizers(finalizers: Any, path: Path | str, *, kube: bool = True
                        ) -> list[FieldError]:
    """apimachinery's `ValidateFinalizers` (qualified names on the list's path; `orphan` and
    `foregroundDeletion` not both), then, for the built-in kinds (`kube`), k/k's
    `validateKubeFinalizerName` per item (`kube_finalizer_name_errors`). Custom resources,
    CRDs and embedded resources get apimachinery's check alone (`kube=False`)."""
    errs: list[FieldError] = []
    if not finalizers:
        return errs
    if not isinstance(finalizers, list):
        return [field.invalid(path, finalizers, "must be a list of strings")]
    base = _path(path)
    names = [str(f) for f in finalizers]
    for name in names:
        errs.extend(validate_qualified_name(name, base))
    if _ORPHAN in names and _FOREGROUND in names:
        errs.append(field.invalid(
            base, names, f"finalizer {_ORPHAN} and {_FOREGROUND} cannot be both set"))
    if kube:
        errs.extend(kube_finalizer_name_errors(names, base))
    return errs


def kube_finalizer_name_errors(finalizers: Any, path: Path | str) -> list[FieldError]:
    """k/k's per-item finalizer check of the built-in kinds (`validateKubeFinalizerName`,
    after the item's qualified-name check): an unprefixed name must be a standard finalizer
    (`metadata.finalizers[0]: Invalid value: "x": name is neither a standard finalizer name
    nor is it fully qualified`)."""
    errs: list[FieldError] = []
    if not isinstance(finalizers, list):
        return errs
    base = _path(path)
    for i, name in enumerate(finalizers):
        item = base.index(i)
        item_errs = validate_qualified_name(str(name), item)
        if not item_errs and "/" not in str(name) and name not in STANDARD_FINALIZERS:
            item_errs.append(field.invalid(item, name, NOT_FULLY_QUALIFIED))
        errs.extend(item_errs)
    return errs


def finalizer_name_warnings(new: Any, old: Any = None) -> list[str]:
    """apiextensions' `validateKubeFinalizerName` for custom resources, as `Warning` texts of
    a create or main-resource update: for each finalizer the write adds (in sorted order),
    its qualified-name problems, and for an unprefixed name that is not standard
    `metadata.finalizers: "x": prefer a domain-qualified finalizer name including a path (/)
    to avoid accidental conflicts with other finalizer writers`."""
    if not isinstance(new, list):
        return []
    before = {str(f) for f in old} if isinstance(old, list) else set()
    out: list[str] = []
    for name in sorted({str(f) for f in new} - before):
        prefix = f"metadata.finalizers: {go_quote(name)}: "
        out.extend(prefix + m for m in meta.qualified_name_errors(name))
        if "/" not in name and name not in STANDARD_FINALIZERS:
            out.append(prefix + PREFER_QUALIFIED_FINALIZER)
    return out


def _names(name: str, prefix: bool, *, label: bool) -> list[str]:
    return meta.name_errors(name, label=label, prefix=prefix)


def dns_subdomain_name(name: str, prefix: bool) -> list[str]:
    """`NameIsDNSSubdomain` (pods, secrets, config maps, nodes, ...)."""
    return _names(name, prefix, label=False)


def dns_label_name(name: str, prefix: bool) -> list[str]:
    """`NameIsDNSLabel` (namespaces)."""
    return _names(name, prefix, label=True)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """`path.IsValidPathSegmentName` (`IsValidPathSegmentPrefix` for a generateName): the
    names of RBAC objects, and of CertificateSigningRequests (whose own
    `ValidateCertificateRequestName` accepts every name, leaving only the apiserver's common
    path-segment check)."""
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def validate_object_meta(
    md: Mapping[str, Any],
    *,
    namespaced: bool,
    name_fn: NameFn = dns_subdomain_name,
    path: Path | str = "metadata",
    kube_finalizers: bool = True,
) -> list[FieldError]:
    """`ValidateObjectMeta` for a create, after `generateName` was resolved: name (or
    generateName), namespace, generation, labels, annotations, ownerReferences, finalizers
    (k/k's finalizer rule only with `kube_finalizers`, see `validate_finalizers`)."""
    base = _path(path)
    errs: list[FieldError] = []
    generate = md.get("generateName") or ""
    if generate:
        errs.extend(field.invalid(base.child("generateName"), generate, m)
                    for m in name_fn(generate, True))
    name = md.get("name") or ""
    if not name:
        errs.append(field.required(base.child("name"), "name or generateName is required"))
    else:
        errs.extend(field.invalid(base.child("name"), name, m) for m in name_fn(name, False))
    namespace = md.get("namespace") or ""
    if namespaced:
        if not namespace:
            errs.append(field.required(base.child("namespace")))
        else:
            errs.extend(field.invalid(base.child("namespace"), namespace, m)
                        for m in meta.dns1123_label_errors(namespace))
    elif namespace:
        errs.append(field.forbidden(base.child("namespace"), "not allowed on this type"))
    generation = md.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool):
        errs.extend(validate_nonnegative_field(generation, base.child("generation")))
    errs.extend(validate_labels(md.get("labels"), base.child("labels")))
    errs.extend(validate_annotations(md.get("annotations"), base.child("annotations")))
    errs.extend(_validate_owner_references(md.get("ownerReferences"),
                                           base.child("ownerReferences")))
    errs.extend(validate_finalizers(md.get("finalizers"), base.child("finalizers"),
                                    kube=kube_finalizers))
    return errs


def _validate_owner_references(refs: Any, path: Path) -> list[FieldError]:
    """`ValidateOwnerReferences`: apiVersion, kind, name and uid set; one controller."""
    errs: list[FieldError] = []
    if not isinstance(refs, list):
        return errs
    controllers: list[str] = []
    for ref in refs:
        if not isinstance(ref, Mapping):
            continue
        if not ref.get("apiVersion"):
            errs.append(field.invalid(path.child("apiVersion"), ref.get("apiVersion") or "",
                                      "version must not be empty"))
        if not ref.get("kind"):
            errs.append(field.invalid(path.child("kind"), ref.get("kind") or "",
                                      "must not be empty"))
        if not ref.get("name"):
            errs.append(field.invalid(path.child("name"), ref.get("name") or "",
                                      "must not be empty"))
        if not ref.get("uid"):
            errs.append(field.invalid(path.child("uid"), ref.get("uid") or "",
                                      "must not be empty"))
        if ref.get("controller") is True:
            controllers.append(f"Kind={ref.get('kind')}, Name={ref.get('name')}")
    if len(controllers) > 1:
        errs.append(field.invalid(
            path, refs,
            "Only one reference can have Controller set to true. Found \"true\" in references "
            "for " + " and ".join(controllers)))
    return errs


def validate_object_meta_update(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    *,
    path: Path | str = "metadata",
    require_resource_version: bool = False,
    kube_finalizers: bool = True,
) -> list[FieldError]:
    """`ValidateObjectMetaUpdate`: no new finalizers while deleting, generation never lower,
    name/namespace/uid/creationTimestamp/deletionTimestamp/deletionGracePeriodSeconds
    immutable, labels/annotations/finalizers well-formed. The registry fills an omitted
    `resourceVersion` before validating (unconditional update), so its check is opt-in.
    apimachinery checks no finalizer names on update; k/k's kinds add their per-item rule
    (`kube_finalizers`)."""
    base = _path(path)
    errs: list[FieldError] = []
    if old.get("deletionTimestamp"):
        old_finalizers = set(old.get("finalizers") or [])
        added = [f for f in new.get("finalizers") or [] if f not in old_finalizers]
        if added:
            listed = ", ".join(f'"{f}"' for f in added)
            errs.append(field.forbidden(
                base.child("finalizers"),
                f"no new finalizers can be added if the object is being deleted, found new "
                f"finalizers []string{{{listed}}}"))
    if require_resource_version and not new.get("resourceVersion"):
        errs.append(field.invalid(base.child("resourceVersion"), "",
                                  "must be specified for an update"))
    new_gen, old_gen = new.get("generation") or 0, old.get("generation") or 0
    if isinstance(new_gen, int) and isinstance(old_gen, int) and new_gen < old_gen:
        errs.append(field.invalid(base.child("generation"), new_gen, "must not be decremented"))
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        errs.extend(validate_immutable_field(new.get(key) or "", old.get(key) or "",
                                             base.child(key)))
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        errs.extend(validate_immutable_field(new.get(key), old.get(key), base.child(key)))
    errs.extend(validate_labels(new.get("labels"), base.child("labels")))
    errs.extend(validate_annotations(new.get("annotations"), base.child("annotations")))
    errs.extend(_validate_owner_references(new.get("ownerReferences"),
                                           base.child("ownerReferences")))
    if kube_finalizers:
        errs.extend(kube_finalizer_name_errors(new.get("finalizers"), base.child("finalizers")))
    return errs
