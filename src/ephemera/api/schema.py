"""The served schema: OpenAPI v2 definitions derived from upstream (scripts/gen_schema.py)
plus the fields of the two KEPs. Nodes are plain dicts in OpenAPI v2 form; `$ref`s point at
`#/definitions/<name>`. Patch strategies and list-map keys are read from the nodes'
`x-kubernetes-*` extensions."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

# metav1.ObjectMeta: every kind's `metadata`, custom resources' too
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

@cache
def definitions() -> dict[str, dict[str, Any]]:
    text = resources.files("ephemera.api").joinpath("data/definitions.json").read_text()
    defs: dict[str, dict[str, Any]] = json.loads(text)
    return defs


def definition(name: str) -> dict[str, Any]:
    return definitions()[name]


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a `$ref` (also one wrapped in `allOf`) to its definition."""
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf", ())) == 1:
        ref = node["allOf"][0].get("$ref")
    if isinstance(ref, str):
        return definition(ref.rsplit("/", 1)[-1])
    return node


@cache
def definition_for(api_version: str, kind: str) -> str | None:
    group, _, version = api_version.rpartition("/")
    for name, d in definitions().items():
        for gvk in d.get("x-kubernetes-group-version-kind", ()):
            if gvk["group"] == group and gvk["version"] == version and gvk["kind"] == kind:
                return name
    return None


_custom_names: set[str] = set()
# Counts the changes of the custom definitions (`set_custom_definitions`), for the caches of
# what a definition's nodes say (field validation's plans), which a change may leave stale.
custom_generation = 0


def set_custom_definitions(defs: dict[str, dict[str, Any]]) -> None:
    """Serve `defs` (the custom resources' definitions, by name) besides the built-in ones,
    replacing the previous set; a name of a built-in definition is never replaced."""
    global custom_generation
    custom_generation += 1
    table = definitions()
    for name in _custom_names:
        table.pop(name, None)
    _custom_names.clear()
    for name, node in defs.items():
        if name not in table:
            table[name] = node
            _custom_names.add(name)
    definition_for.cache_clear()
