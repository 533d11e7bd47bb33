"""Ingress validation details not covered over HTTP (`ephemera.api.ingress`)."""

from __future__ import annotations

from ephemera.api.ingress import validate_ingress_create


def test_a_resource_backend_without_kind_or_name_is_required_with_no_detail() -> None:
    """As current upstream's `validateIngressTypedLocalObjectReference` (older releases said
    "kind is required")."""
    errs = validate_ingress_create({"spec": {"defaultBackend": {"resource": {
        "apiGroup": "example.com"}}}})
    assert [str(e) for e in errs] == ["spec.defaultBackend.resource.kind: Required value",
                                      "spec.defaultBackend.resource.name: Required value"]
