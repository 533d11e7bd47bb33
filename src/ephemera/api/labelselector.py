"""`metav1.LabelSelector` (`matchLabels`, `matchExpressions`) as the workload kinds carry it:
its validation (`ValidateLabelSelector` with `AllowInvalidLabelValueInSelector` false), its
conversion to a label selector (`LabelSelectorAsSelector`) and its text form
(`FormatLabelSelector`, which kubectl's SELECTOR column and `?labelSelector=` use), and the
way Go's `%#v` prints it in a field error. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import GoText, go_quote
from ephemera.api.selectors import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    LabelSelector,
    Requirement,
)

_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _exprs(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [e for e in selector.get("matchExpressions") or [] if isinstance(e, dict)]


def is_empty(selector: Mapping[str, Any] | None) -> bool:
    """No matchLabels and no matchExpressions: a selector that matches everything."""
    sel = selector or {}
    return not sel.get("matchLabels") and not sel.get("matchExpressions")


def validate_label_selector(selector: Any, path: Path) -> list[FieldError]:
    """`ValidateLabelSelector` (strict label values)."""
    if not isinstance(selector, dict):
        return []
    errs = v.validate_labels(selector.get("matchLabels"), path.child("matchLabels"))
    for i, expr in enumerate(_exprs(selector)):
        p = path.child("matchExpressions").index(i)
        op = expr.get("operator")
        values = list(expr.get("values") or [])
        if op in ("In", "NotIn"):
            if not values:
                errs.append(field.required(p.child("values"), "must be specified when "
                                           "`operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(field.forbidden(p.child("values"), "may not be specified when "
                                            "`operator` is 'Exists' or 'DoesNotExist'"))
        else:
            errs.append(field.invalid(p.child("operator"), op if op is not None else "",
                                      "not a valid selector operator"))
        errs.extend(v.validate_label_name(str(expr.get("key") or ""), p.child("key")))
        for j, value in enumerate(values):
            errs.extend(field.invalid(p.child("values").index(j), value, m)
                        for m in meta.label_value_errors(str(value)))
    return errs


def as_selector(selector: Mapping[str, Any] | None) -> LabelSelector | None:
    """`LabelSelectorAsSelector`: None for a selector that does not convert (an unknown
    operator, `In` without values); an absent selector matches nothing upstream
    (`labels.Nothing`), which callers check with `selector is None` first."""
    sel = _d(selector)
    reqs: list[Requirement] = []
    for key, value in sorted(_d(sel.get("matchLabels")).items()):
        reqs.append(Requirement(str(key), IN, (str(value),)))
    for expr in _exprs(sel):
        op = _OPERATORS.get(str(expr.get("operator")))
        values = tuple(str(x) for x in expr.get("values") or [])
        if op is None or (op in (IN, NOT_IN) and not values) or \
                (op in (EXISTS, DOES_NOT_EXIST) and values):
            return None
        reqs.append(Requirement(str(expr.get("key") or ""), op, tuple(sorted(values))))
    return LabelSelector(tuple(reqs))


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether `labels` match `selector`; an empty selector matches everything here, an
    unconvertible one nothing."""
    sel = as_selector(selector)
    return sel is not None and sel.matches(labels)


def format_label_selector(selector: Mapping[str, Any] | None) -> str:
    """`metav1.FormatLabelSelector`: `<none>` for an empty one, `<error>` for a bad one."""
    sel = as_selector(selector)
    if sel is None:
        return "<error>"
    text = ",".join(_requirement_text(r) for r in sel.requirements)
    return text or "<none>"


def query_string(selector: Mapping[str, Any] | None) -> str:
    """The selector as a `labelSelector` query parameter."""
    sel = as_selector(selector)
    return "" if sel is None else ",".join(_requirement_text(r) for r in sel.requirements)


def _requirement_text(r: Requirement) -> str:
    if r.operator == IN and len(r.values) == 1:
        return f"{r.key}={r.values[0]}"
    return str(r)


def go_label_selector(selector: Any) -> GoText:
    """Go's `%#v` of a `v1.LabelSelector`, as a field error prints the bad value."""
    sel = _d(selector)
    labels = sel.get("matchLabels")
    if labels is None:
        labels_text = "map[string]string(nil)"
    else:
        labels_text = "map[string]string{" + ", ".join(
            f"{go_quote(str(k))}:{go_quote(str(labels[k]))}" for k in sorted(labels)) + "}"
    exprs = sel.get("matchExpressions")
    if exprs is None:
        exprs_text = "[]v1.LabelSelectorRequirement(nil)"
    else:
        items = []
        for e in _exprs(sel):
            values = e.get("values")
            values_text = ("[]string(nil)" if values is None else
                           "[]string{" + ", ".join(go_quote(str(x)) for x in values) + "}")
            items.append(f"v1.LabelSelectorRequirement{{Key:{go_quote(str(e.get('key') or ''))},"
                         f" Operator:{go_quote(str(e.get('operator') or ''))}, "
                         f"Values:{values_text}}}")
        exprs_text = "[]v1.LabelSelectorRequirement{" + ", ".join(items) + "}"
    return GoText(f"v1.LabelSelector{{MatchLabels:{labels_text}, MatchExpressions:{exprs_text}}}")


def selector_matches(selector: Mapping[str, Any] | None,
                     labels: Mapping[str, str] | None) -> bool:
    """Whether a spec's `selector` selects an object labelled `labels`: a missing selector
    selects nothing (`labels.Nothing`), an empty one everything, an unconvertible one
    nothing."""
    return selector is not None and matches(selector, labels)
