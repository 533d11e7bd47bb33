"""Derive the schema ephemera serves from the upstream Kubernetes OpenAPI v2 document.

Reads ../shared/data/kubernetes-openapi-v2.json (reference data; see its README), keeps the
definitions reachable from the kinds ephemera serves, drops the upstream prose, and writes
src/ephemera/api/data/definitions.json. Run: `python scripts/gen_schema.py [SOURCE]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "kubernetes-openapi-v2.json"
TARGET = ROOT / "src" / "ephemera" / "api" / "data" / "definitions.json"

ROOTS = [
    "io.k8s.api.core.v1." + k
    for k in ("Namespace", "Pod", "ConfigMap", "Secret", "ServiceAccount", "Node", "Event",
              "ResourceQuota", "LimitRange", "Binding")
] + ["io.k8s.api.coordination.v1.Lease"]
EXTRA = [
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
]


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def _strip_prose(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_prose(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_prose(v) for v in node]
    return node


def closure(defs: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    keep: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = defs[name]
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(found - keep.keys())
    return keep


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SOURCE
    defs = json.loads(source.read_text())["definitions"]
    roots = ROOTS + [r + "List" for r in ROOTS if r + "List" in defs] + EXTRA
    kept = {k: _strip_prose(v) for k, v in sorted(closure(defs, roots).items())}
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(kept)} definitions to {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
