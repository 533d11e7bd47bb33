"""`/openapi/v2` as protobuf: the Swagger 2.0 document in the form kubectl asks for
(`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), gnostic's
`openapi.v2.Document` message, as upstream's kube-openapi handler serves it (answered as
`application/com.github.proto-openapi.spec.v2.v1.0+protobuf`).

kubectl reads it when it validates a manifest whose kind the OpenAPI v3 documents do not
name (a mistyped kind, a CRD not installed): it looks the kind up in the v2 definitions and,
finding none, lets the request go on to the REST mapping, whose error is the one users know
(`no matches for kind "Pood" in version "v1"`). Without a protobuf answer it stops at "failed
to download openapi".

The messages are declared here from gnostic's `OpenAPIv2.proto` (package `openapi.v2`, the
field numbers are the wire format) with the `protobuf` library's descriptors; only what a
Swagger 2.0 document as ephemera writes it needs (formData parameters, headers, examples and
OAuth2 security are not). `encode(document)` converts the JSON document as gnostic's compiler
reads one: `x-` keys become `vendor_extension` entries whose `Any.yaml` holds the value as
JSON (which is YAML), values that may be one of several kinds (a parameter, a `$ref`; a
schema, a boolean) pick the field by their shape, and a key it does not know raises
`ValueError` (a test converts every document ephemera serves).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

__all__ = ["CONTENT_TYPE", "CONTENT_TYPES", "decode", "encode"]

# The answer's Content-Type, as upstream's handler writes it: the `@` of the form kubectl
# asks for is not allowed in a media type, and Go's parser refuses it.
CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
CONTENT_TYPES = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", CONTENT_TYPE)

PACKAGE = "openapi.v2"

# Each message: its fields as (name, number, type), a type being a scalar ("string", "bool",
# "double", "int64") or a message of this package; a leading "*" makes a field repeated.
# Names and numbers as in gnostic's OpenAPIv2.proto.
_PRIMITIVE_FIELDS = [
    ("type", 1, "string"), ("format", 2, "string"), ("items", 3, "PrimitivesItems"),
    ("collection_format", 4, "string"), ("default", 5, "Any"), ("maximum", 6, "double"),
    ("exclusive_maximum", 7, "bool"), ("minimum", 8, "double"),
    ("exclusive_minimum", 9, "bool"), ("max_length", 10, "int64"),
    ("min_length", 11, "int64"), ("pattern", 12, "string"), ("max_items", 13, "int64"),
    ("min_items", 14, "int64"), ("unique_items", 15, "bool"), ("enum", 16, "*Any"),
    ("multiple_of", 17, "double"), ("vendor_extension", 18, "*NamedAny"),
]


def _sub_schema(with_empty_value: bool) -> list[tuple[str, int, str]]:
    """A query or path parameter (`QueryParameterSubSchema`, `PathParameterSubSchema`):
    `required`, `in`, `description`, `name`, then a query parameter's `allow_empty_value`,
    then the primitive's fields, numbered on from there."""
    head = [("required", 1, "bool"), ("in", 2, "string"), ("description", 3, "string"),
            ("name", 4, "string")]
    if with_empty_value:
        head.append(("allow_empty_value", 5, "bool"))
    return head + [(name, len(head) + number, kind) for name, number, kind in _PRIMITIVE_FIELDS]


MESSAGES: dict[str, list[tuple[str, int, str]]] = {
    "AdditionalPropertiesItem": [("schema", 1, "Schema"), ("boolean", 2, "bool")],
    "Any": [("yaml", 2, "string")],  # 1, a google.protobuf.Any, is never written
    "ApiKeySecurity": [("type", 1, "string"), ("name", 2, "string"), ("in", 3, "string"),
                       ("description", 4, "string"), ("vendor_extension", 5, "*NamedAny")],
    "BasicAuthenticationSecurity": [("type", 1, "string"), ("description", 2, "string"),
                                    ("vendor_extension", 3, "*NamedAny")],
    "BodyParameter": [("description", 1, "string"), ("name", 2, "string"),
                      ("in", 3, "string"), ("required", 4, "bool"), ("schema", 5, "Schema"),
                      ("vendor_extension", 6, "*NamedAny")],
    "Contact": [("name", 1, "string"), ("url", 2, "string"), ("email", 3, "string"),
                ("vendor_extension", 4, "*NamedAny")],
    "Definitions": [("additional_properties", 1, "*NamedSchema")],
    "Document": [("swagger", 1, "string"), ("info", 2, "Info"), ("host", 3, "string"),
                 ("base_path", 4, "string"), ("schemes", 5, "*string"),
                 ("consumes", 6, "*string"), ("produces", 7, "*string"),
                 ("paths", 8, "Paths"), ("definitions", 9, "Definitions"),
                 ("security", 12, "*SecurityRequirement"),
                 ("security_definitions", 13, "SecurityDefinitions"), ("tags", 14, "*Tag"),
                 ("external_docs", 15, "ExternalDocs"),
                 ("vendor_extension", 16, "*NamedAny")],
    "ExternalDocs": [("description", 1, "string"), ("url", 2, "string"),
                     ("vendor_extension", 3, "*NamedAny")],
    "Info": [("title", 1, "string"), ("version", 2, "string"), ("description", 3, "string"),
             ("terms_of_service", 4, "string"), ("contact", 5, "Contact"),
             ("license", 6, "License"), ("vendor_extension", 7, "*NamedAny")],
    "ItemsItem": [("schema", 1, "*Schema")],
    "JsonReference": [("_ref", 1, "string"), ("description", 2, "string")],
    "License": [("name", 1, "string"), ("url", 2, "string"),
                ("vendor_extension", 3, "*NamedAny")],
    "NamedAny": [("name", 1, "string"), ("value", 2, "Any")],
    "NamedPathItem": [("name", 1, "string"), ("value", 2, "PathItem")],
    "NamedResponseValue": [("name", 1, "string"), ("value", 2, "ResponseValue")],
    "NamedSchema": [("name", 1, "string"), ("value", 2, "Schema")],
    "NamedSecurityDefinitionsItem": [("name", 1, "string"),
                                     ("value", 2, "SecurityDefinitionsItem")],
    "NamedStringArray": [("name", 1, "string"), ("value", 2, "StringArray")],
    "NonBodyParameter": [("query_parameter_sub_schema", 3, "QueryParameterSubSchema"),
                         ("path_parameter_sub_schema", 4, "PathParameterSubSchema")],
    "Operation": [("tags", 1, "*string"), ("summary", 2, "string"),
                  ("description", 3, "string"), ("external_docs", 4, "ExternalDocs"),
                  ("operation_id", 5, "string"), ("produces", 6, "*string"),
                  ("consumes", 7, "*string"), ("parameters", 8, "*ParametersItem"),
                  ("responses", 9, "Responses"), ("schemes", 10, "*string"),
                  ("deprecated", 11, "bool"), ("security", 12, "*SecurityRequirement"),
                  ("vendor_extension", 13, "*NamedAny")],
    "Parameter": [("body_parameter", 1, "BodyParameter"),
                  ("non_body_parameter", 2, "NonBodyParameter")],
    "ParametersItem": [("parameter", 1, "Parameter"), ("json_reference", 2, "JsonReference")],
    "PathItem": [("_ref", 1, "string"), ("get", 2, "Operation"), ("put", 3, "Operation"),
                 ("post", 4, "Operation"), ("delete", 5, "Operation"),
                 ("options", 6, "Operation"), ("head", 7, "Operation"),
                 ("patch", 8, "Operation"), ("parameters", 9, "*ParametersItem"),
                 ("vendor_extension", 10, "*NamedAny")],
    "PathParameterSubSchema": _sub_schema(with_empty_value=False),
    "Paths": [("vendor_extension", 1, "*NamedAny"), ("path", 2, "*NamedPathItem")],
    "PrimitivesItems": _PRIMITIVE_FIELDS,
    "Properties": [("additional_properties", 1, "*NamedSchema")],
    "QueryParameterSubSchema": _sub_schema(with_empty_value=True),
    "Response": [("description", 1, "string"), ("schema", 2, "SchemaItem"),
                 ("vendor_extension", 5, "*NamedAny")],
    "ResponseValue": [("response", 1, "Response"), ("json_reference", 2, "JsonReference")],
    "Responses": [("response_code", 1, "*NamedResponseValue"),
                  ("vendor_extension", 2, "*NamedAny")],
    "Schema": [("_ref", 1, "string"), ("format", 2, "string"), ("title", 3, "string"),
               ("description", 4, "string"), ("default", 5, "Any"),
               ("multiple_of", 6, "double"), ("maximum", 7, "double"),
               ("exclusive_maximum", 8, "bool"), ("minimum", 9, "double"),
               ("exclusive_minimum", 10, "bool"), ("max_length", 11, "int64"),
               ("min_length", 12, "int64"), ("pattern", 13, "string"),
               ("max_items", 14, "int64"), ("min_items", 15, "int64"),
               ("unique_items", 16, "bool"), ("max_properties", 17, "int64"),
               ("min_properties", 18, "int64"), ("required", 19, "*string"),
               ("enum", 20, "*Any"), ("additional_properties", 21, "AdditionalPropertiesItem"),
               ("type", 22, "TypeItem"), ("items", 23, "ItemsItem"), ("all_of", 24, "*Schema"),
               ("properties", 25, "Properties"), ("discriminator", 26, "string"),
               ("read_only", 27, "bool"), ("external_docs", 29, "ExternalDocs"),
               ("example", 30, "Any"), ("vendor_extension", 31, "*NamedAny")],
    "SchemaItem": [("schema", 1, "Schema")],
    "SecurityDefinitions": [("additional_properties", 1, "*NamedSecurityDefinitionsItem")],
    "SecurityDefinitionsItem": [
        ("basic_authentication_security", 1, "BasicAuthenticationSecurity"),
        ("api_key_security", 2, "ApiKeySecurity")],
    "SecurityRequirement": [("additional_properties", 1, "*NamedStringArray")],
    "StringArray": [("value", 1, "*string")],
    "Tag": [("name", 1, "string"), ("description", 2, "string"),
            ("external_docs", 3, "ExternalDocs"), ("vendor_extension", 4, "*NamedAny")],
    "TypeItem": [("value", 1, "*string")],
}

# The fields that are one of several (a `oneof` in the .proto).
ONEOFS = {"AdditionalPropertiesItem", "NonBodyParameter", "Parameter", "ParametersItem",
          "ResponseValue", "SecurityDefinitionsItem", "SchemaItem"}

_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
}


@cache
def _classes() -> dict[str, type[message.Message]]:
    """The message classes, built once from `MESSAGES` in a pool of their own."""
    file = descriptor_pb2.FileDescriptorProto(name="ephemera/openapiv2.proto",
                                              package=PACKAGE, syntax="proto3")
    for name, fields in MESSAGES.items():
        spec = file.message_type.add(name=name)
        if name in ONEOFS:
            spec.oneof_decl.add(name="oneof")
        for field_name, number, kind in fields:
            repeated = kind.startswith("*")
            kind = kind.lstrip("*")
            entry = spec.field.add(
                name=field_name, number=number,
                label=(descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                       else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL))
            if kind in _SCALARS:
                entry.type = _SCALARS[kind]
            else:
                entry.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                entry.type_name = f".{PACKAGE}.{kind}"
            if name in ONEOFS:
                entry.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{PACKAGE}.{name}")) for name in MESSAGES}


def _json_name(field_name: str) -> str:
    """The document's key of a field: `_ref` is `$ref`, snake case is camel case."""
    if field_name == "_ref":
        return "$ref"
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@cache
def _keys(name: str) -> dict[str, tuple[str, str]]:
    """A message's document keys -> (field, type), its vendor extensions left out."""
    return {_json_name(field_name): (field_name, kind) for field_name, _, kind in MESSAGES[name]
            if field_name != "vendor_extension"}


def _any(value: Any) -> message.Message:
    return _classes()["Any"](yaml=json.dumps(value, separators=(",", ":"), sort_keys=True))


def _named(name: str, items: Mapping[str, Any],
           convert: Callable[[Any], message.Message]) -> list[message.Message]:
    return [_classes()[name](name=key, value=convert(value)) for key, value in items.items()]


def _extensions(value: Mapping[str, Any]) -> list[message.Message]:
    return _named("NamedAny", {k: v for k, v in value.items() if k.startswith("x-")}, _any)


def _message(name: str, value: Any) -> message.Message:
    """`value` (a part of the document) as the message `name`."""
    special = _SPECIAL.get(name)
    if special is not None:
        return special(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"openapi v2 protobuf: {name} is not an object: {value!r:.80}")
    built = _classes()[name]()
    keys = _keys(name)
    extensible = any(f == "vendor_extension" for f, _, _ in MESSAGES[name])
    for key, item in value.items():
        if key.startswith("x-") and extensible:
            continue  # gathered below
        if key not in keys:
            raise ValueError(f"openapi v2 protobuf: {name} has no field for {key!r}")
        field_name, kind = keys[key]
        _set(built, field_name, kind, item)
    if extensible:
        built.vendor_extension.extend(_extensions(value))
    return built


def _set(built: message.Message, field_name: str, kind: str, value: Any) -> None:
    repeated = kind.startswith("*")
    kind = kind.lstrip("*")
    if kind in _SCALARS:
        if repeated:
            getattr(built, field_name).extend(value)
        else:
            setattr(built, field_name, value)
        return
    if repeated:
        getattr(built, field_name).extend(_message(kind, item) for item in value)
    else:
        getattr(built, field_name).CopyFrom(_message(kind, value))


def _map_of(name: str, value_kind: str) -> Callable[[Any], message.Message]:
    """A message whose one field is a list of (name, value) pairs: a JSON object."""
    def convert(value: Any) -> message.Message:
        return _classes()[name](additional_properties=_named(
            f"Named{value_kind}", value, lambda item: _message(value_kind, item)))
    return convert


def _paths(value: Mapping[str, Any]) -> message.Message:
    paths = {k: v for k, v in value.items() if not k.startswith("x-")}
    return _classes()["Paths"](
        vendor_extension=_extensions(value),
        path=_named("NamedPathItem", paths, lambda item: _message("PathItem", item)))


def _responses(value: Mapping[str, Any]) -> message.Message:
    codes = {k: v for k, v in value.items() if not k.startswith("x-")}
    return _classes()["Responses"](
        vendor_extension=_extensions(value),
        response_code=_named("NamedResponseValue", codes,
                             lambda item: _message("ResponseValue", item)))


def _reference_or(kind: str, field_name: str) -> Callable[[Any], message.Message]:
    """A `$ref` (`json_reference`) or the object itself (`field_name`)."""
    def convert(value: Mapping[str, Any]) -> message.Message:
        name = "ParametersItem" if kind == "Parameter" else "ResponseValue"
        if "$ref" in value:
            return _classes()[name](json_reference=_message("JsonReference", value))
        return _classes()[name](**{field_name: _message(kind, value)})
    return convert


def _parameter(value: Mapping[str, Any]) -> message.Message:
    where = value.get("in")
    if where == "body":
        return _classes()["Parameter"](body_parameter=_message("BodyParameter", value))
    sub = {"query": "QueryParameterSubSchema", "path": "PathParameterSubSchema"}.get(str(where))
    if sub is None:
        raise ValueError(f"openapi v2 protobuf: a parameter in {where!r} is not written")
    field_name = "query_parameter_sub_schema" if where == "query" else "path_parameter_sub_schema"
    return _classes()["Parameter"](non_body_parameter=_classes()["NonBodyParameter"](
        **{field_name: _message(sub, value)}))


def _additional_properties(value: Any) -> message.Message:
    if isinstance(value, bool):
        return _classes()["AdditionalPropertiesItem"](boolean=value)
    return _classes()["AdditionalPropertiesItem"](schema=_message("Schema", value))


def _strings(name: str) -> Callable[[Any], message.Message]:
    """`type` (one name or a list) as a `TypeItem`; a list of strings as a `StringArray`."""
    def convert(value: Any) -> message.Message:
        return _classes()[name](value=[value] if isinstance(value, str) else list(value))
    return convert


def _items(value: Any) -> message.Message:
    schemas = value if isinstance(value, list) else [value]
    return _classes()["ItemsItem"](schema=[_message("Schema", item) for item in schemas])


def _security_definition(value: Mapping[str, Any]) -> message.Message:
    kind = value.get("type")
    if kind == "apiKey":
        return _classes()["SecurityDefinitionsItem"](
            api_key_security=_message("ApiKeySecurity", value))
    if kind == "basic":
        return _classes()["SecurityDefinitionsItem"](
            basic_authentication_security=_message("BasicAuthenticationSecurity", value))
    raise ValueError(f"openapi v2 protobuf: a security definition of type {kind!r} is not "
                     "written")


def _schema_item(value: Mapping[str, Any]) -> message.Message:
    return _classes()["SchemaItem"](schema=_message("Schema", value))


_SPECIAL: dict[str, Callable[[Any], message.Message]] = {
    "Any": _any,
    "AdditionalPropertiesItem": _additional_properties,
    "Definitions": _map_of("Definitions", "Schema"),
    "ItemsItem": _items,
    "Parameter": _parameter,
    "ParametersItem": _reference_or("Parameter", "parameter"),
    "Paths": _paths,
    "Properties": _map_of("Properties", "Schema"),
    "Responses": _responses,
    "ResponseValue": _reference_or("Response", "response"),
    "SchemaItem": _schema_item,
    "SecurityDefinitions": _map_of("SecurityDefinitions", "SecurityDefinitionsItem"),
    "SecurityDefinitionsItem": _security_definition,
    "SecurityRequirement": _map_of("SecurityRequirement", "StringArray"),
    "StringArray": _strings("StringArray"),
    "TypeItem": _strings("TypeItem"),
}


def encode(document: Mapping[str, Any]) -> bytes:
    """The Swagger 2.0 `document` as gnostic's `openapi.v2.Document`, serialized."""
    return _message("Document", document).SerializeToString(deterministic=True)


def decode(data: bytes) -> message.Message:
    """A serialized `openapi.v2.Document` (for tests and tools)."""
    return _classes()["Document"].FromString(data)
