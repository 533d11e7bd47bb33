"""`ephemera images`: the node's local image store (`ephemera.kubelet.images`) from the
command line, working on the same `--root-dir` as the kubelet (the store lives in
`<root-dir>/images/`; with `ephemera up` that is `<data-dir>/kubelet`).

- `build-base`: build the busybox base image from /bin/busybox (reproducible digest);
- `import FILE [--name REF]`: an OCI layout directory, an OCI archive or a docker archive;
- `list [-o table|json]`: the images, crictl style (IMAGE, TAG, IMAGE ID, SIZE);
- `remove REF...`: a name, or a whole image by id or digest reference.
Exit code 1 with a message on stderr when an image cannot be found, read or imported."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ephemera.kubelet.images import (
    Image,
    ImageError,
    ImageStore,
    InvalidReference,
    LayerError,
    parse_reference,
)

DEFAULT_ROOT_DIR = Path("/var/lib/ephemera/kubelet")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "images", help="manage the node's local image store",
        description="Manage the node's local OCI image store (<root-dir>/images).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root-dir", type=Path, default=DEFAULT_ROOT_DIR, metavar="DIR",
                        help="the kubelet's root directory (default: %(default)s; with "
                             "`ephemera up`: <data-dir>/kubelet)")
    actions = parser.add_subparsers(dest="images_command", metavar="ACTION", required=True)

    build = actions.add_parser("build-base", parents=[common],
                               help="build the busybox base image from /bin/busybox")
    build.add_argument("--busybox", type=Path, default=Path("/bin/busybox"), metavar="FILE",
                       help="the static busybox binary (default: %(default)s)")
    build.set_defaults(func=_build_base)

    imp = actions.add_parser("import", parents=[common],
                             help="import an OCI layout, OCI archive or docker archive")
    imp.add_argument("file", type=Path, metavar="FILE")
    imp.add_argument("--name", default=None, metavar="REF",
                     help="name the (single) image REF instead of the archive's names")
    imp.set_defaults(func=_import)

    lst = actions.add_parser("list", parents=[common], help="list the images")
    lst.add_argument("-o", "--output", choices=("table", "json"), default="table")
    lst.set_defaults(func=_list)

    rm = actions.add_parser("remove", parents=[common],
                            help="remove a name, or an image by id or digest")
    rm.add_argument("refs", nargs="+", metavar="REF")
    rm.set_defaults(func=_remove)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _build_base(args: argparse.Namespace) -> int:
    try:
        image = ImageStore(args.root_dir).build_base(args.busybox)
    except (ImageError, LayerError, OSError) as err:
        return _fail(str(err))
    print(f"{image.repo_tags[0]} {image.id} (manifest {image.manifest_digest})")
    return 0


def _import(args: argparse.Namespace) -> int:
    try:
        images = ImageStore(args.root_dir).import_archive(args.file, name=args.name)
    except (ImageError, LayerError, InvalidReference, OSError) as err:
        return _fail(str(err))
    for image in images:
        print(f"{' '.join(image.repo_tags) or '<none>'} {image.id}")
    return 0


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.3g}{unit}"
        value /= 1000
    return f"{size}B"  # pragma: no cover


def _rows(image: Image) -> list[tuple[str, str]]:
    if not image.repo_tags:
        return [("<none>", "<none>")]
    rows = []
    for tag in image.repo_tags:
        ref = parse_reference(tag)
        rows.append((ref.repository, ref.tag))
    return rows


def _as_json(image: Image) -> dict[str, Any]:
    return {
        "id": image.id, "manifestDigest": image.manifest_digest,
        "repoTags": list(image.repo_tags), "repoDigests": list(image.repo_digests),
        "size": image.size, "layers": [str(p) for p in image.layers],
        "entrypoint": list(image.entrypoint), "cmd": list(image.cmd),
        "env": [f"{k}={v}" for k, v in image.env], "workingDir": image.working_dir,
        "user": image.user,
    }


def _list(args: argparse.Namespace) -> int:
    try:
        images = ImageStore(args.root_dir).list()
    except (ImageError, OSError, ValueError) as err:
        return _fail(str(err))
    if args.output == "json":
        print(json.dumps({"images": [_as_json(i) for i in images]}, indent=2))
        return 0
    table = [("IMAGE", "TAG", "IMAGE ID", "SIZE")]
    for image in images:
        for repo, tag in _rows(image):
            table.append((repo, tag, image.id.removeprefix("sha256:")[:13],
                          _human_size(image.size)))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        print("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "   "
              + row[3])
    return 0


def _remove(args: argparse.Namespace) -> int:
    store = ImageStore(args.root_dir)
    code = 0
    for ref in args.refs:
        try:
            for removed in store.remove(ref):
                print(f"Deleted: {removed}")
        except (ImageError, InvalidReference, OSError) as err:
            code = _fail(str(err))
    return code
