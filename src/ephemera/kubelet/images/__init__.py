"""The node's OCI image store: `ImageStore` (store.py) keeps images under
`<root>/images/` as an OCI image layout with each layer unpacked once, overlay-ready
(layers.py); `base.py` builds the reproducible busybox base image; `reference.py` parses and
normalises image references; `archives.py` reads what an import takes. See store.py for the
on-disk layout and the rules."""

from ephemera.kubelet.images.base import BASE_IMAGE_REF
from ephemera.kubelet.images.errors import ImageError, ImageNotFound, LayerError
from ephemera.kubelet.images.reference import InvalidReference, Reference, parse_reference
from ephemera.kubelet.images.store import Image, ImageStore

__all__ = [
    "BASE_IMAGE_REF",
    "Image",
    "ImageError",
    "ImageNotFound",
    "ImageStore",
    "InvalidReference",
    "LayerError",
    "Reference",
    "parse_reference",
]
