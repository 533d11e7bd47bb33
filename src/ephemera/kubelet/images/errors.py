"""The image store's exceptions and the digest check every module shares."""

from __future__ import annotations

import re

from ephemera.api.goformat import go_quote

_SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageError(Exception):
    """An image operation failed; the message says which image and why."""


class ImageNotFound(ImageError, LookupError):
    """No image matches the reference or id."""


class LayerError(ImageError):
    """A layer that cannot be unpacked safely; the message names the layer and the entry."""


def digest_hex(digest: str) -> str:
    """The hex part of a `sha256:<64 hex>` digest (the blob's file name); ImageError for any
    other algorithm or a malformed digest, so a digest never becomes a path trick."""
    if not _SHA256_DIGEST.match(digest):
        raise ImageError(f"unsupported or malformed digest {go_quote(digest)}")
    return digest[len("sha256:"):]
