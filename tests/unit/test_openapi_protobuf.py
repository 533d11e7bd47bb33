"""The protobuf form of `/openapi/v2` (`ephemera.apiserver.openapiproto`): gnostic's field
numbers on the wire, the fields that are one of several chosen by the value's shape, vendor
extensions, and a refusal of what it does not know."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ephemera.apiserver import openapi, openapiproto


def test_the_wire_carries_gnostic_field_numbers() -> None:
    data = openapiproto.encode({"swagger": "2.0", "info": {"title": "T", "version": "v"}})
    # Document.swagger is field 1, Document.info field 2 (Info.title 1, Info.version 2).
    assert data == b"\x0a\x032.0" + b"\x12\x06" + b"\x0a\x01T" + b"\x12\x01v"


def _schema(document: dict[str, Any], name: str) -> Any:
    decoded = openapiproto.decode(openapiproto.encode(document))
    return {n.name: n.value for n in decoded.definitions.additional_properties}[name]


def test_schemas_keep_types_refs_items_maps_and_extensions() -> None:
    schema = _schema({"definitions": {"Thing": {
        "type": "object", "required": ["spec"], "description": "a thing",
        "properties": {
            "spec": {"$ref": "#/definitions/Spec"},
            "tags": {"type": "array", "items": {"type": "string"},
                     "x-kubernetes-list-type": "set"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "additionalProperties": True},
            "count": {"type": "integer", "format": "int32", "minimum": 0}},
        "x-kubernetes-group-version-kind": [{"group": "g", "kind": "Thing", "version": "v1"}],
    }}}, "Thing")
    assert list(schema.type.value) == ["object"] and list(schema.required) == ["spec"]
    properties = {n.name: n.value for n in schema.properties.additional_properties}
    assert properties["spec"]._ref == "#/definitions/Spec"
    assert [s.type.value[0] for s in properties["tags"].items.schema] == ["string"]
    assert [(e.name, e.value.yaml) for e in properties["tags"].vendor_extension] == [
        ("x-kubernetes-list-type", '"set"')]
    assert properties["labels"].additional_properties.schema.type.value[0] == "string"
    assert properties["free"].additional_properties.boolean is True
    assert properties["count"].format == "int32" and properties["count"].minimum == 0
    gvk = schema.vendor_extension[0]
    assert gvk.name == "x-kubernetes-group-version-kind"
    assert json.loads(gvk.value.yaml) == [{"group": "g", "kind": "Thing", "version": "v1"}]


def test_parameters_and_responses_pick_their_field_by_shape() -> None:
    decoded = openapiproto.decode(openapiproto.encode({"paths": {"/things/{name}": {
        "get": {"operationId": "readThing", "parameters": [
            {"name": "body", "in": "body", "required": True,
             "schema": {"$ref": "#/definitions/Thing"}},
            {"name": "limit", "in": "query", "type": "integer", "uniqueItems": True},
            {"$ref": "#/parameters/pretty"}],
            "responses": {"200": {"description": "OK", "schema": {"type": "string"}},
                          "401": {"$ref": "#/responses/unauthorized"}},
            "x-kubernetes-action": "get"},
        "parameters": [{"name": "name", "in": "path", "required": True, "type": "string"}]}}}))
    item = decoded.paths.path[0]
    assert item.name == "/things/{name}"
    body, query, reference = item.value.get.parameters
    assert body.parameter.body_parameter.schema._ref == "#/definitions/Thing"
    assert query.parameter.non_body_parameter.query_parameter_sub_schema.type == "integer"
    assert reference.json_reference._ref == "#/parameters/pretty"
    path = item.value.parameters[0].parameter.non_body_parameter.path_parameter_sub_schema
    assert (path.name, path.required, path.type) == ("name", True, "string")
    ok, unauthorized = item.value.get.responses.response_code
    assert ok.value.response.schema.schema.type.value[0] == "string"
    assert unauthorized.value.json_reference._ref == "#/responses/unauthorized"
    assert item.value.get.vendor_extension[0].value.yaml == '"get"'


@pytest.mark.parametrize("document", [
    {"definitions": {"Thing": {"nullable": True}}},
    {"paths": {"/x": {"get": {"parameters": [{"name": "f", "in": "formData"}]}}}},
    {"info": "not an object"},
])
def test_what_it_does_not_know_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="openapi v2 protobuf"):
        openapiproto.encode(document)


def test_the_served_document_converts_whole() -> None:
    served = openapi.openapi_v2_document()
    decoded = openapiproto.decode(openapi.openapi_v2_protobuf_bytes())
    assert {n.name for n in decoded.definitions.additional_properties} == \
        set(served["definitions"])
    assert {n.name for n in decoded.paths.path} == set(served["paths"])
    operations = sum(1 for item in served["paths"].values() for key in item
                     if key != "parameters")
    decoded_operations = sum(1 for n in decoded.paths.path for method in (
        "get", "put", "post", "delete", "patch", "head", "options")
        if n.value.HasField(method))
    assert decoded_operations == operations
