"""storage.k8s.io/v1 CSIStorageCapacity: upstream's validation of the kind
(`ValidateCSIStorageCapacity`, `ValidateCSIStorageCapacityUpdate` in
`pkg/apis/storage/validation`) with its messages and paths.

ephemera runs no CSI driver and no external-provisioner, so nothing writes these objects
and nothing reads them (its scheduler has no volume binding): they are stored and served
as data, as on a cluster whose drivers do not publish capacity. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta
from ephemera.api import labelselector as ls
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.quantity import QuantityError, quantity_from_json


def validate(capacity: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateCSIStorageCapacity` past the object metadata: `nodeTopology` is a valid
    label selector, `storageClassName` a DNS subdomain (an empty one is invalid too, as
    upstream's `ValidateClassName` finds it), `capacity` not negative."""
    errs = ls.validate_label_selector(capacity.get("nodeTopology"), Path("nodeTopology"))
    class_name = capacity.get("storageClassName")
    class_name = class_name if isinstance(class_name, str) else ""
    errs.extend(field.invalid("storageClassName", class_name, m)
                for m in meta.dns1123_subdomain_errors(class_name))
    # maximumVolumeSize is not checked upstream either.
    if capacity.get("capacity") is not None:
        errs.extend(_nonnegative_quantity(capacity["capacity"], Path("capacity")))
    return errs


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateCSIStorageCapacityUpdate` past the object metadata: the inputs of the CSI
    `GetCapacity` call (`nodeTopology`, `storageClassName`) are immutable."""
    errs: list[FieldError] = []
    topology = new.get("nodeTopology")
    if topology != old.get("nodeTopology"):
        shown = None if topology is None else ls.go_label_selector(topology)  # nil: "null"
        errs.append(field.invalid("nodeTopology", shown, v.FIELD_IMMUTABLE))
    if (new.get("storageClassName") or "") != (old.get("storageClassName") or ""):
        errs.append(field.invalid("storageClassName", new.get("storageClassName") or "",
                                  v.FIELD_IMMUTABLE))
    return errs


def _nonnegative_quantity(raw: Any, path: Path) -> list[FieldError]:
    """`ValidateNonnegativeQuantity`: `Invalid value: "-1": must be greater than or equal
    to 0` (the quantity's canonical text as the value)."""
    try:
        quantity = quantity_from_json(raw)
    except (QuantityError, TypeError) as err:
        return [field.invalid(path, raw, str(err))]
    if quantity.sign() < 0:
        return [field.invalid(path, str(quantity), v.IS_NEGATIVE)]
    return []
