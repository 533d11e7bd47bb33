"""Image references: parsing and normalising them the way docker and containerd do
(`distribution/reference`'s ParseNormalizedNamed), so that `busybox`, `busybox:latest` and
`docker.io/library/busybox:latest` name the same image, and `name@sha256:<hex>` names a
manifest. Also recognises image ids (`sha256:<hex>`, a bare 64-hex id, or an unambiguous
prefix of at least 12 hex digits). Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ephemera.api.goformat import go_quote

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?$")
_PATH_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
MIN_ID_PREFIX = 12


class InvalidReference(ValueError):
    """A string that is neither an image reference nor an image id."""


@dataclass(frozen=True)
class Reference:
    """A normalised reference: `domain/path[:tag][@digest]`. A name with neither tag nor
    digest gets the tag `latest`, as docker does."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}"

    @property
    def tagged(self) -> str:
        """`repository:tag` ("" when untagged)."""
        return f"{self.repository}:{self.tag}" if self.tag else ""

    @property
    def digested(self) -> str:
        """`repository@digest` ("" without a digest)."""
        return f"{self.repository}@{self.digest}" if self.digest else ""

    def __str__(self) -> str:
        text = self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def familiar(self) -> str:
        """The short form docker prints (`busybox:latest` for docker.io/library/busybox)."""
        name = self.repository
        if self.domain == DEFAULT_DOMAIN:
            name = self.path.removeprefix(OFFICIAL_REPO_PREFIX)
        if self.tag:
            name += f":{self.tag}"
        if self.digest:
            name += f"@{self.digest}"
        return name


def _split_domain(name: str) -> tuple[str, str]:
    slash = name.find("/")
    first = name[:slash]
    if slash == -1 or (
        "." not in first and ":" not in first and first != "localhost" and first == first.lower()
    ):
        domain, rest = DEFAULT_DOMAIN, name
    else:
        domain, rest = first, name[slash + 1:]
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in rest:
        rest = OFFICIAL_REPO_PREFIX + rest
    return domain, rest


def parse_reference(text: str, *, default_tag: bool = True) -> Reference:
    """Parse and normalise `text`; raise InvalidReference with docker's wording when it is
    not a valid reference. With `default_tag`, a bare name gets the tag `latest`."""
    if not text or text != text.strip():
        raise InvalidReference(f"invalid reference format: {go_quote(text)}")
    name, at, digest = text.partition("@")
    if at and not _DIGEST_RE.match(digest):
        raise InvalidReference(
            f"invalid reference format: {go_quote(text)}: bad digest {go_quote(digest)}")
    tag = ""
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG_RE.match(tag):
            raise InvalidReference(
                f"invalid reference format: {go_quote(text)}: bad tag {go_quote(tag)}")
    domain, path = _split_domain(name)
    if not _DOMAIN_RE.match(domain):
        raise InvalidReference(
            f"invalid reference format: {go_quote(text)}: bad domain {go_quote(domain)}")
    if not _PATH_RE.match(path):
        if _PATH_RE.match(path.lower()):
            raise InvalidReference(
                f"invalid reference format: repository name ({path}) must be lowercase")
        raise InvalidReference(f"invalid reference format: {go_quote(text)}")
    if len(domain) + 1 + len(path) > 255:
        raise InvalidReference(
            f"invalid reference format: {go_quote(text)}: repository name too long")
    if not tag and not digest and default_tag:
        tag = DEFAULT_TAG
    return Reference(domain, path, tag, digest)


def image_id_prefix(text: str) -> str | None:
    """If `text` names an image by id, the `sha256:<hex prefix>` to match ids against:
    `sha256:<hex>` (a full id, or a prefix of at least 12 hex digits) or a bare hex id of at
    least 12 digits. A bare hex string may also be a repository name; callers try the id
    first and fall back to the name."""
    hex_part = text.removeprefix("sha256:")
    if not _HEX_RE.match(hex_part) or not MIN_ID_PREFIX <= len(hex_part) <= 64:
        return None
    return f"sha256:{hex_part}"
