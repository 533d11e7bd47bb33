"""`metav1.LabelSelector` (the structured selector of workload specs: `matchLabels` and
`matchExpressions`): its validation (`ValidateLabelSelector`), whether it selects a set of
labels (`LabelSelectorAsSelector`: a missing selector selects nothing, an empty one
everything) and its text form (`labelSelector=` of a list). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta
from ephemera.api import validation as meta_validation
from ephemera.api.field import FieldError, Path

__all__ = ["selector_matches", "selector_text", "validate_label_selector"]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate_label_selector(selector: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if selector is None:
        return errs
    if not isinstance(selector, Mapping):
        return [field.invalid(path, selector, "must be a label selector")]
    errs.extend(meta_validation.validate_labels(selector.get("matchLabels"),
                                                path.child("matchLabels")))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        at = path.child("matchExpressions").index(i)
        operator = expr.get("operator")
        values = expr.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                errs.append(field.required(at.child("values"),
                                           "must be specified when `operator` is 'In' or "
                                           "'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errs.append(field.forbidden(at.child("values"),
                                            "may not be specified when `operator` is 'Exists' "
                                            "or 'DoesNotExist'"))
        else:
            errs.append(field.invalid(at.child("operator"), operator,
                                      "not a valid selector operator"))
        errs.extend(meta_validation.validate_label_name(str(expr.get("key") or ""),
                                                        at.child("key")))
        for j, value in enumerate(values):
            errs.extend(field.invalid(at.child("values").index(j), value, m)
                        for m in meta.label_value_errors(str(value)))
    return errs


def selector_matches(selector: Mapping[str, Any] | None,
                     labels: Mapping[str, str] | None) -> bool:
    """Whether `selector` selects an object labelled `labels` (None selects nothing; an
    invalid operator selects nothing, as an unconvertible selector)."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


def selector_text(selector: Mapping[str, Any]) -> str:
    """The selector as labels.Selector's `String()` (`a=b,c in (d,e),!f`, the requirements
    sorted by key): the `labelSelector` query of the objects it selects."""
    terms: list[tuple[str, str]] = [(str(k), f"{k}={v}") for k, v in
                                    (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, operator = str(expr.get("key") or ""), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or []))
        if operator == "In":
            terms.append((key, f"{key} in ({values})"))
        elif operator == "NotIn":
            terms.append((key, f"{key} notin ({values})"))
        elif operator == "Exists":
            terms.append((key, key))
        elif operator == "DoesNotExist":
            terms.append((key, f"!{key}"))
    return ",".join(text for _, text in sorted(terms, key=lambda t: t[0]))
