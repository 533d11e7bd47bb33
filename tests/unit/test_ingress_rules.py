"""Ingress validation details not covered over HTTP (`ephemera.api.ingress`)."""

from __future__ import annotations

from ephemera.api.ingress import table_cells, validate_ingress_create


def test_a_resource_backend_without_kind_or_name_is_required_with_no_detail() -> None:
    """As current upstream's `validateIngressTypedLocalObjectReference` (older releases said
    "kind is required")."""
    errs = validate_ingress_create({"spec": {"defaultBackend": {"resource": {
        "apiGroup": "example.com"}}}})
    assert [str(e) for e in errs] == ["spec.defaultBackend.resource.kind: Required value",
                                      "spec.defaultBackend.resource.name: Required value"]


def test_the_address_cell_lists_each_address_once_sorted() -> None:
    """upstream's `ingressLoadBalancerStatusStringer` joins a string set's sorted list."""
    obj = {"spec": {}, "status": {"loadBalancer": {"ingress": [
        {"ip": "10.0.0.9"}, {"hostname": "lb.example.com"}, {"ip": "10.0.0.10"},
        {"ip": "10.0.0.9"}, {"ip": "", "hostname": ""}]}}}
    assert table_cells(obj) == ("<none>", "*", "10.0.0.10,10.0.0.9,lb.example.com", "80")
