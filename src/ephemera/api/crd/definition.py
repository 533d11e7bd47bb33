"""The CustomResourceDefinition object itself: its defaults and its validation, with the
messages of upstream's `apiextensions/validation` (`ValidateCustomResourceDefinition`,
`...Update`, `...Status`) and the structural schema rules of `structuralschema` (every
node typed, `metadata` at the root only `name`/`generateName`, `properties` and
`additionalProperties` exclusive, no `uniqueItems`, list types, int-or-string, CEL rules that
compile, defaults that validate).

What ephemera does not serve is refused here rather than accepted and ignored: a `Webhook`
conversion (`spec.conversion.strategy`) is a 422 naming this server.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ephemera.api import conditions, field, meta
from ephemera.api.crd import cel, celcost
from ephemera.api.crd import schema as crschema
from ephemera.api.field import FieldError, Path
from ephemera.api.validation import (
    dns_subdomain_name,
    validate_immutable_field,
    validate_object_meta,
    validate_object_meta_update,
)

GROUP = "apiextensions.k8s.io"
ESTABLISHED = "Established"
NAMES_ACCEPTED = "NamesAccepted"
PRINTER_COLUMN_TYPES = ["integer", "number", "string", "boolean", "date"]
PRINTER_COLUMN_FORMATS = ["int32", "int64", "float", "double", "byte", "date", "date-time",
                          "password"]
LIST_TYPES = ["atomic", "map", "set"]
WEBHOOK_REFUSED = ("Webhook conversion is not supported by this server (ephemera serves "
                   "several versions with the None strategy only)")
MAX_SELECTABLE_FIELDS = 8

Obj = dict[str, Any]


def dict_at(obj: Any, key: str) -> dict[str, Any]:
    """`obj[key]` when `obj` is a mapping and that is a dict; else an empty dict."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, dict) else {}


def list_at(obj: Any, key: str) -> list[Any]:
    """`obj[key]` when `obj` is a mapping and that is a list; else an empty list."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


_d, _l = dict_at, list_at


def _s(obj: Any, key: str) -> str:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else ""


# --- defaults --------------------------------------------------------------------------------


def set_defaults(crd: Obj) -> None:
    """v1's defaults: singular and listKind from the kind, conversion `None`."""
    spec = crd.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict):
        kind = _s(names, "kind")
        if kind and not names.get("singular"):
            names["singular"] = kind.lower()
        if kind and not names.get("listKind"):
            names["listKind"] = kind + "List"
    conversion = spec.get("conversion")
    if not isinstance(conversion, dict):
        spec["conversion"] = {"strategy": "None"}
    elif not conversion.get("strategy"):
        conversion["strategy"] = "None"


# --- reading ---------------------------------------------------------------------------------


def versions(crd: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [v for v in _l(_d(crd, "spec"), "versions") if isinstance(v, dict)]


def storage_version(crd: Mapping[str, Any]) -> str:
    for v in versions(crd):
        if v.get("storage"):
            return _s(v, "name")
    return ""


def condition_true(crd: Mapping[str, Any], type_: str) -> bool:
    return conditions.is_true(crd.get("status"), type_)


# --- validation ------------------------------------------------------------------------------


def _dns1035(value: str) -> list[str]:
    return crschema.dns1035_label_errors(value)


def _name_fn(crd: Obj) -> Any:
    spec = _d(crd, "spec")
    required = f"{_s(_d(spec, 'names'), 'plural')}.{_s(spec, 'group')}"

    def check(name: str, prefix: bool) -> list[str]:
        errs = dns_subdomain_name(name, prefix)
        if name != required:
            errs.append('must be spec.names.plural+"."+spec.group')
        return errs

    return check


def validate_create(crd: Obj) -> list[FieldError]:
    errs = validate_object_meta(meta.ensure_metadata(crd), namespaced=False,
                                name_fn=_name_fn(crd), kube_finalizers=False)
    errs.extend(validate_spec(_d(crd, "spec"), Path("spec")))
    errs.extend(validate_status(_d(crd, "status"), Path("status")))
    return errs


def validate_update(crd: Obj, old: Obj) -> list[FieldError]:
    errs = validate_object_meta_update(meta.ensure_metadata(crd), meta.ensure_metadata(old),
                                       kube_finalizers=False)
    spec, old_spec = _d(crd, "spec"), _d(old, "spec")
    path = Path("spec")
    errs.extend(validate_spec(spec, path))
    if condition_true(old, ESTABLISHED):
        errs.extend(validate_immutable_field(spec.get("scope"), old_spec.get("scope"),
                                             path.child("scope")))
        errs.extend(validate_immutable_field(_d(spec, "names").get("kind"),
                                             _d(old_spec, "names").get("kind"),
                                             path.child("names", "kind")))
    errs.extend(validate_immutable_field(spec.get("group"), old_spec.get("group"),
                                         path.child("group")))
    errs.extend(validate_immutable_field(_d(spec, "names").get("plural"),
                                         _d(old_spec, "names").get("plural"),
                                         path.child("names", "plural")))
    errs.extend(validate_status(_d(crd, "status"), Path("status")))
    errs.extend(validate_stored_versions(crd))
    return errs


def validate_status_update(crd: Obj, old: Obj) -> list[FieldError]:
    errs = validate_object_meta_update(meta.ensure_metadata(crd), meta.ensure_metadata(old),
                                       kube_finalizers=False)
    errs.extend(validate_status(_d(crd, "status"), Path("status")))
    errs.extend(validate_stored_versions(crd))
    return errs


def validate_stored_versions(crd: Obj) -> list[FieldError]:
    names = {_s(v, "name") for v in versions(crd)}
    path = Path("status", "storedVersions")
    return [field.invalid(path.index(i), v, "must appear in spec.versions")
            for i, v in enumerate(_l(_d(crd, "status"), "storedVersions")) if v not in names]


def validate_status(status: Obj, path: Path) -> list[FieldError]:
    return validate_names(_d(status, "acceptedNames"), path.child("acceptedNames"))


def validate_spec(spec: Obj, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    group = _s(spec, "group")
    if not group:
        errs.append(field.required(path.child("group")))
    elif msgs := meta.dns1123_subdomain_errors(group):
        errs.append(field.invalid(path.child("group"), group, ",".join(msgs)))
    elif len(group.split(".")) < 2:
        errs.append(field.invalid(path.child("group"), group,
                                  "should be a domain with at least one dot"))
    scope = _s(spec, "scope")
    if not scope:
        errs.append(field.required(path.child("scope")))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(field.not_supported(path.child("scope"), scope, ["Cluster", "Namespaced"]))

    vs = versions({"spec": spec})
    storage_count, seen, unique = 0, set(), True
    for i, version in enumerate(vs):
        name = _s(version, "name")
        if version.get("storage"):
            storage_count += 1
        if name in seen:
            unique = False
        seen.add(name)
        if msgs := _dns1035(name):
            errs.append(field.invalid(path.child("versions").index(i).child("name"), name,
                                      ",".join(msgs)))
    shown = [_s(v, "name") for v in vs]
    if not unique:
        errs.append(field.invalid(path.child("versions"), shown,
                                  "must contain unique version names"))
    if storage_count != 1:
        errs.append(field.invalid(path.child("versions"), shown,
                                  "must have exactly one version marked as storage version"))
    if vs and not any(v.get("served") for v in vs):
        errs.append(field.invalid(path.child("versions"), shown,
                                  "must have at least one served version"))

    names = _d(spec, "names")
    npath = path.child("names")
    for key in ("plural", "singular", "kind", "listKind"):
        if not _s(names, key):
            errs.append(field.required(npath.child(key)))
    errs.extend(validate_names(names, npath))

    if spec.get("preserveUnknownFields") is True:
        errs.append(field.invalid(path.child("preserveUnknownFields"), True,
                                  "must be false in order to use defaults in the schema"))
    conversion = _d(spec, "conversion")
    strategy = _s(conversion, "strategy")
    cpath = path.child("conversion")
    if strategy == "Webhook":
        errs.append(field.forbidden(cpath.child("strategy"), WEBHOOK_REFUSED))
    elif strategy not in ("", "None"):
        errs.append(field.not_supported(cpath.child("strategy"), strategy, ["None", "Webhook"]))
    elif conversion.get("webhook") is not None:
        errs.append(field.forbidden(cpath.child("webhook"),
                                    "should not be set when strategy is not set to Webhook"))

    for i, version in enumerate(vs):
        errs.extend(_validate_version(version, path.child("versions").index(i)))
    return errs


def validate_names(names: Obj, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("plural", "singular"):
        value = _s(names, key)
        if value and (msgs := _dns1035(value)):
            errs.append(field.invalid(path.child(key), value, ",".join(msgs)))
    for key in ("kind", "listKind"):
        value = _s(names, key)
        if value and (msgs := _dns1035(value.lower())):
            errs.append(field.invalid(path.child(key), value,
                                      "may have mixed case, but should otherwise match: "
                                      + ",".join(msgs)))
    for i, short in enumerate(_l(names, "shortNames")):
        if msgs := _dns1035(str(short)):
            errs.append(field.invalid(path.child("shortNames").index(i), short,
                                      ",".join(msgs)))
    kind = _s(names, "kind")
    if kind and kind == _s(names, "listKind"):
        errs.append(field.invalid(path.child("listKind"), kind,
                                  "kind and listKind may not be the same"))
    for i, category in enumerate(_l(names, "categories")):
        if msgs := _dns1035(str(category)):
            errs.append(field.invalid(path.child("categories").index(i), category,
                                      ",".join(msgs)))
    return errs


def _deprecation_warning_errors(version: Obj) -> list[str]:
    """upstream's `validateDeprecationWarning` (a byte offset names a bad character)."""
    warning = version.get("deprecationWarning")
    if not version.get("deprecated") and warning is not None:
        return ["can only be set for deprecated versions"]
    if not isinstance(warning, str):
        return []
    problems = []
    if len(warning.encode()) > 256:
        problems.append("must be <= 256 characters long")
    if not warning:
        problems.append("must not be an empty string")
    for i, char in enumerate(warning):
        if not char.isprintable():
            problems.append("must only contain printable UTF-8 characters; non-printable "
                            f"character found at index {len(warning[:i].encode())}")
            break
    return problems


def _validate_version(version: Obj, path: Path) -> list[FieldError]:
    errs: list[FieldError] = [
        field.invalid(path.child("deprecationWarning"), version.get("deprecationWarning"), p)
        for p in _deprecation_warning_errors(version)]
    schema_path = path.child("schema", "openAPIV3Schema")
    root = _d(_d(version, "schema"), "openAPIV3Schema")
    if not root:
        errs.append(field.required(schema_path, "schemas are required"))
    else:
        errs.extend(validate_structural(root, schema_path))
    subresources = _d(version, "subresources")
    scale = subresources.get("scale")
    if isinstance(scale, dict):
        spath = path.child("subresources", "scale")
        spec_path = _s(scale, "specReplicasPath")
        if not spec_path:
            errs.append(field.required(spath.child("specReplicasPath")))
        elif not spec_path.startswith(".spec."):
            errs.append(field.invalid(spath.child("specReplicasPath"), spec_path,
                                      "should be a json path under .spec"))
        status_path = _s(scale, "statusReplicasPath")
        if not status_path:
            errs.append(field.required(spath.child("statusReplicasPath")))
        elif not status_path.startswith(".status."):
            errs.append(field.invalid(spath.child("statusReplicasPath"), status_path,
                                      "should be a json path under .status"))
        selector = scale.get("labelSelectorPath")
        if isinstance(selector, str) and not (selector.startswith(".spec.")
                                              or selector.startswith(".status.")):
            errs.append(field.invalid(spath.child("labelSelectorPath"), selector,
                                      "should be a json path under either .spec or .status"))
    for i, column in enumerate(_l(version, "additionalPrinterColumns")):
        cpath = path.child("additionalPrinterColumns").index(i)
        if not _s(column, "name"):
            errs.append(field.required(cpath.child("name")))
        type_ = _s(column, "type")
        if not type_:
            errs.append(field.required(cpath.child("type")))
        elif type_ not in PRINTER_COLUMN_TYPES:
            errs.append(field.not_supported(cpath.child("type"), type_, PRINTER_COLUMN_TYPES))
        fmt = _s(column, "format")
        if fmt and fmt not in PRINTER_COLUMN_FORMATS:
            errs.append(field.not_supported(cpath.child("format"), fmt,
                                            PRINTER_COLUMN_FORMATS))
        priority = column.get("priority")
        if isinstance(priority, int) and priority < 0:
            errs.append(field.invalid(cpath.child("priority"), priority,
                                      "negative priorities are invalid"))
        json_path = _s(column, "jsonPath")
        if not json_path:
            errs.append(field.required(cpath.child("jsonPath")))
    selectable = _l(version, "selectableFields")
    if len(selectable) > MAX_SELECTABLE_FIELDS:
        errs.append(FieldError("TooMany", str(path.child("selectableFields")),
                               f"must have at most {MAX_SELECTABLE_FIELDS} items",
                               len(selectable)))
    for i, sf in enumerate(selectable):
        fpath = path.child("selectableFields").index(i).child("jsonPath")
        json_path = _s(sf, "jsonPath")
        if not json_path:
            errs.append(field.required(fpath))
        elif not json_path.startswith("."):
            errs.append(field.invalid(fpath, json_path, "must be a simple field path"))
        elif root:
            node = _node_at(root, json_path)
            if node is None:
                errs.append(field.invalid(fpath, json_path,
                                          "is an invalid field path"))
            elif node.get("type") not in ("string", "integer", "boolean"):
                errs.append(field.invalid(fpath, json_path,
                                          "selectable field type must be one of: "
                                          "string, integer, boolean"))
    return errs


def _node_at(root: Mapping[str, Any], json_path: str) -> Mapping[str, Any] | None:
    node: Any = root
    for part in json_path.strip(".").split("."):
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping) or not isinstance(props.get(part), Mapping):
            return None
        node = props[part]
    return node if isinstance(node, Mapping) else None


# --- structural schemas -----------------------------------------------------------------------


def validate_structural(root: Obj, path: Path) -> list[FieldError]:
    """upstream's structural checks of a version's `openAPIV3Schema`."""
    errs: list[FieldError] = []
    type_ = root.get("type")
    if type_ != "object":
        errs.append(field.invalid(path.child("type"), type_ or "",
                                  "must be object at the root"))
    metadata = _d(_d(root, "properties"), "metadata")
    if metadata and (set(metadata) - {"type", "properties", "description"}
                     or set(_d(metadata, "properties")) - {"name", "generateName"}):
        errs.append(field.forbidden(path.child("properties").key("metadata"),
                                    "must not specify anything other than name and "
                                    "generateName, but metadata is implicitly specified"))
    _walk_structural(root, path, errs, root=True)
    return errs


def _walk_structural(node: Obj, path: Path, errs: list[FieldError], *, root: bool = False,
                     items: bool = False, cardinality: int | None = 1) -> None:
    """`cardinality`: how many times `node` can occur in one object (None: under an
    unbounded list or map), for the CEL rules' cost (`celcost`)."""
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    type_ = node.get("type")
    if preserve is False:
        errs.append(field.invalid(path.child("x-kubernetes-preserve-unknown-fields"), False,
                                  "must be true or undefined"))
    if int_or_string and type_:
        errs.append(field.invalid(path.child("type"), type_,
                                  "must be empty if x-kubernetes-int-or-string is true"))
    if not root and not type_ and not int_or_string and not preserve:
        what = "array items" if items else "object fields"
        errs.append(field.required(path.child("type"),
                                   f"must not be empty for specified {what}"))
    if node.get("uniqueItems") is True:
        errs.append(field.forbidden(path.child("uniqueItems"),
                                    "uniqueItems cannot be set to true since the runtime "
                                    "complexity becomes quadratic"))
    props = _d(node, "properties")
    extra = node.get("additionalProperties")
    if props and (extra is False or isinstance(extra, dict)):
        errs.append(field.forbidden(path.child("additionalProperties"),
                                    "additionalProperties and properties are mutual exclusive"))
    if type_ == "array" and not isinstance(node.get("items"), dict):
        errs.append(field.required(path.child("items"), "must be specified"))
    if node.get("x-kubernetes-embedded-resource") is True and type_ != "object":
        errs.append(field.invalid(path.child("type"), type_ or "",
                                  "must be object if x-kubernetes-embedded-resource is true"))
    list_type = node.get("x-kubernetes-list-type")
    if list_type is not None:
        lpath = path.child("x-kubernetes-list-type")
        if list_type not in LIST_TYPES:
            errs.append(field.not_supported(lpath, list_type, LIST_TYPES))
        elif type_ != "array":
            errs.append(field.invalid(lpath, list_type, "must only be used on type array"))
        elif list_type == "map":
            keys = _l(node, "x-kubernetes-list-map-keys")
            item = _d(node, "items")
            if not keys:
                errs.append(field.required(path.child("x-kubernetes-list-map-keys"),
                                           "must not be empty if x-kubernetes-list-type is "
                                           "map"))
            elif item.get("type") != "object":
                errs.append(field.invalid(path.child("items").child("type"),
                                          item.get("type") or "",
                                          "must be object if parent array's "
                                          "x-kubernetes-list-type is map"))
            else:
                item_props = _d(item, "properties")
                for i, key in enumerate(keys):
                    if key not in item_props:
                        errs.append(field.invalid(
                            path.child("x-kubernetes-list-map-keys").index(i), key,
                            "entries must all be names of item properties"))
                    elif key not in _l(item, "required") and "default" not in _d(
                            item_props, key):
                        errs.append(field.required(
                            path.child("items").child("properties").key(key),
                            "all map keys must be required or have a default value"))
    if node.get("x-kubernetes-list-map-keys") is not None and list_type != "map":
        errs.append(field.forbidden(path.child("x-kubernetes-list-map-keys"),
                                    "requires x-kubernetes-list-type: map"))
    for i, rule in enumerate(_l(node, "x-kubernetes-validations")):
        rpath = path.child("x-kubernetes-validations").index(i)
        text = _s(rule, "rule")
        if not text:
            errs.append(field.required(rpath.child("rule")))
            continue
        try:
            compiled = cel.compile_rule(text)
        except cel.CompileError as err:
            errs.append(field.invalid(rpath.child("rule"), text, f"compilation failed: {err}"))
        else:
            if celcost.exceeds_hundredfold(compiled.tree, node,
                                           celcost.cardinality_of(node, cardinality)):
                errs.append(field.forbidden(rpath.child("rule"), celcost.COST_MESSAGE))
        expression = _s(rule, "messageExpression")
        if expression:
            try:
                cel.compile_rule(expression)
            except cel.CompileError as err:
                errs.append(field.invalid(rpath.child("messageExpression"), expression,
                                          f"messageExpression compilation failed: {err}"))
        reason = rule.get("reason")
        if reason is not None and reason not in cel.REASONS:
            errs.append(field.not_supported(rpath.child("reason"), reason, list(cel.REASONS)))
    if "default" in node and not root:
        # as upstream: the default with the defaults inside it applied must validate
        value = copy.deepcopy(node["default"])
        crschema.default(value, node)
        dpath = str(path.child("default"))
        errs.extend(FieldError(e.type, dpath + (f".{e.field}" if e.field else ""),
                               e.detail.strip(), e.bad_value)
                    for e in crschema.validate(value, node))
    for name, sub in props.items():
        if isinstance(sub, dict):
            _walk_structural(sub, path.child("properties").key(name), errs,
                             cardinality=cardinality)
    if isinstance(extra, dict):
        _walk_structural(extra, path.child("additionalProperties"), errs,
                         cardinality=celcost.child_cardinality(node, cardinality))
    item_node = node.get("items")
    if isinstance(item_node, dict):
        _walk_structural(item_node, path.child("items"), errs, items=True,
                         cardinality=celcost.child_cardinality(node, cardinality))
    for combinator in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(_l(node, combinator)):
            if isinstance(sub, dict):
                _walk_value_only(sub, path.child(combinator).index(i), errs)


def _walk_value_only(node: Obj, path: Path, errs: list[FieldError]) -> None:
    """Inside allOf/anyOf/oneOf/not only value validations may appear (no types, no
    defaults, no descriptions of new fields beyond the structure)."""
    for key in ("default", "nullable", "additionalProperties", "x-kubernetes-preserve-unknown-"
                "fields", "x-kubernetes-embedded-resource"):
        if key in node:
            errs.append(field.forbidden(path.child(key), "must be undefined to be structural"))


# --- what is accepted but not enforced as upstream enforces it -------------------------------

CEL_COST_WARNING = ("{path}: this server checks only a lower bound of the estimated cost of "
                    "x-kubernetes-validations rules (upstream refuses a rule whose estimated "
                    "cost exceeds its budget); it applies upstream's runtime cost limits with "
                    "an approximate count, and evaluates rules far more slowly (within those "
                    "limits a write can take minutes); bound arrays, maps and strings with "
                    "maxItems, maxProperties and maxLength")


def _first_rule_path(node: Any, path: Path) -> Path | None:
    """The path of the first schema node with `x-kubernetes-validations` under `node`."""
    if not isinstance(node, Mapping):
        return None
    if _l(node, "x-kubernetes-validations"):
        return path.child("x-kubernetes-validations")
    for key in ("properties", "patternProperties", "definitions", "dependencies"):
        for name, child in _d(node, key).items():
            found = _first_rule_path(child, path.child(key).key(str(name)))
            if found is not None:
                return found
    for key in ("items", "additionalProperties", "not"):
        found = _first_rule_path(node.get(key), path.child(key))
        if found is not None:
            return found
    for key in ("allOf", "anyOf", "oneOf"):
        for i, child in enumerate(_l(node, key)):
            found = _first_rule_path(child, path.child(key).index(i))
            if found is not None:
                return found
    return None


def cel_cost_warnings(crd: Obj, old: Obj | None) -> list[str]:
    """A `Warning` for a CRD whose schema has CEL rules (on create, and on an update that
    changes its spec): of upstream's static cost check ephemera has only a lower bound of
    the estimate (`celcost`); the runtime limits are upstream's, over an approximate count
    (`celmeter`), and cel-python is far slower than cel-go within them."""
    spec = _d(crd, "spec")
    if old is not None and spec == _d(old, "spec"):
        return []
    for i, version in enumerate(versions(crd)):
        schema = _d(_d(version, "schema"), "openAPIV3Schema")
        path = Path("spec").child("versions").index(i).child("schema").child("openAPIV3Schema")
        found = _first_rule_path(schema, path)
        if found is not None:
            return [CEL_COST_WARNING.format(path=found)]
    return []
