"""The names and conditions of a CustomResourceDefinition, pure: upstream's naming
controller (`NamesAccepted`, the accepted names, conflicts with the other CRDs of the group),
the establishing controller's step (`Established`), `SetCRDCondition`, the kube-aware
version order that picks a group's preferred version, and a deprecated version's warning."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ephemera.api import conditions, meta
from ephemera.api.crd import definition as crddef
from ephemera.api.crd.definition import dict_at as _d
from ephemera.api.crd.definition import list_at as _l


def set_condition(crd: dict[str, Any], condition: dict[str, Any]) -> None:
    """upstream's `SetCRDCondition`: the transition time moves only with the status."""
    conditions = crd.setdefault("status", {}).setdefault("conditions", [])
    for i, old in enumerate(conditions):
        if old.get("type") == condition["type"]:
            if old.get("status") == condition["status"]:
                condition["lastTransitionTime"] = old.get("lastTransitionTime")
            else:
                condition["lastTransitionTime"] = meta.now_rfc3339()
            conditions[i] = condition
            return
    condition["lastTransitionTime"] = meta.now_rfc3339()
    conditions.append(condition)


def find_condition(crd: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    return conditions.find(crd.get("status"), type_)


def _accepted_names_in_group(crds: list[dict[str, Any]], group: str, skip: str
                             ) -> tuple[set[str], set[str]]:
    resources: set[str] = set()
    kinds: set[str] = set()
    for crd in crds:
        if meta.name_of(crd) == skip or _d(crd, "spec").get("group") != group:
            continue
        names = _d(_d(crd, "status"), "acceptedNames")
        resources.update(str(n) for n in (names.get("plural"), names.get("singular")) if n)
        resources.update(str(n) for n in _l(names, "shortNames"))
        kinds.update(str(n) for n in (names.get("kind"), names.get("listKind")) if n)
    return resources, kinds


def _fresh(requested: str, accepted: str, used: set[str]) -> str | None:
    """upstream's `equalToAcceptedOrFresh`: None when fine, else the conflict message."""
    if requested == accepted or requested not in used:
        return None
    return f'"{requested}" is already in use'


def names_and_conditions(crd: dict[str, Any], crds: list[dict[str, Any]]
                         ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """upstream's naming controller: the accepted names, `NamesAccepted` and the
    `Established` condition it leaves for the establishing controller."""
    spec = _d(crd, "spec")
    resources, kinds = _accepted_names_in_group(crds, str(spec.get("group") or ""),
                                                meta.name_of(crd))
    requested = _d(spec, "names")
    accepted = _d(_d(crd, "status"), "acceptedNames")
    new = copy.deepcopy(accepted)
    condition: dict[str, Any] = {"type": crddef.NAMES_ACCEPTED, "status": "Unknown"}

    def conflict(reason: str, message: str) -> None:
        condition.update(status="False", reason=reason, message=message)

    for key, reason, used in (("plural", "PluralConflict", resources),
                              ("singular", "SingularConflict", resources)):
        message = _fresh(str(requested.get(key) or ""), str(accepted.get(key) or ""), used)
        if message:
            conflict(reason, message)
        elif requested.get(key):
            new[key] = requested[key]
    short_conflict = None
    for short in _l(requested, "shortNames"):
        if short not in _l(accepted, "shortNames") and short in resources:
            short_conflict = f'"{short}" is already in use'
            break
    if short_conflict:
        conflict("ShortNamesConflict", short_conflict)
    elif requested.get("shortNames"):
        new["shortNames"] = list(requested["shortNames"])
    else:
        new.pop("shortNames", None)
    for key, reason in (("kind", "KindConflict"), ("listKind", "ListKindConflict")):
        message = _fresh(str(requested.get(key) or ""), str(accepted.get(key) or ""), kinds)
        if message:
            conflict(reason, message)
        elif requested.get(key):
            new[key] = requested[key]
    if requested.get("categories"):
        new["categories"] = list(requested["categories"])
    else:
        new.pop("categories", None)
    if condition["status"] == "Unknown":
        condition.update(status="True", reason="NoConflicts", message="no conflicts found")
    established = copy.deepcopy(find_condition(crd, crddef.ESTABLISHED)) or {
        "type": crddef.ESTABLISHED, "status": "False", "reason": "NotAccepted",
        "message": "not all names are accepted"}
    if established.get("status") != "True" and condition["status"] == "True":
        # The establishing controller's step, at once: nothing here waits for HA peers.
        established = {"type": crddef.ESTABLISHED, "status": "True",
                       "reason": "InitialNamesAccepted",
                       "message": "the initial names have been accepted"}
    return new, condition, established


_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(name: str) -> tuple[int, int, int, str]:
    """upstream's `version.CompareKubeAwareVersionStrings` as a sort key (highest first):
    GA before beta before alpha, higher numbers first, then the others alphabetically."""
    m = _VERSION.match(name)
    if m is None:
        return (3, 0, 0, name)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, name)


def deprecation_warnings(spec: Mapping[str, Any], version: Mapping[str, Any]) -> tuple[str, ...]:
    """The `Warning` every request to a served `version` of a CRD gets (upstream's CRD
    handler): none unless `deprecated`; its `deprecationWarning` when set, else
    `GROUP/VERSION KIND is deprecated` and, when a newer served version is not deprecated,
    `; use GROUP/NEWEST KIND`."""
    if not version.get("deprecated"):
        return ()
    custom = version.get("deprecationWarning")
    if isinstance(custom, str):
        return (custom,)
    group = str(spec.get("group") or "")
    kind = str(_d(spec, "names").get("kind") or "")
    name = str(version.get("name") or "")
    text = f"{group}/{name} {kind} is deprecated"
    newer = [str(v.get("name")) for v in _l(spec, "versions")
             if v.get("served") and not v.get("deprecated") and
             version_priority(str(v.get("name"))) < version_priority(name)]
    if newer:
        text += f"; use {group}/{min(newer, key=version_priority)} {kind}"
    return (text,)
