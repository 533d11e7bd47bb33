"""Image reference parsing and normalisation (ephemera.kubelet.images.reference), checked
against what docker's ParseNormalizedNamed gives for the same strings."""

from __future__ import annotations

import pytest

from ephemera.kubelet.images.reference import (
    InvalidReference,
    image_id_prefix,
    parse_reference,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "normalised"), [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:latest", "docker.io/library/busybox:latest"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("library/busybox", "docker.io/library/busybox:latest"),
    ("docker.io/library/busybox:latest", "docker.io/library/busybox:latest"),
    ("index.docker.io/library/busybox", "docker.io/library/busybox:latest"),
    ("docker.io/busybox", "docker.io/library/busybox:latest"),
    ("user/app:v1", "docker.io/user/app:v1"),
    ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
    ("localhost/app", "localhost/app:latest"),
    ("localhost:5000/team/app:dev", "localhost:5000/team/app:dev"),
    (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
    (f"busybox:1.36@{DIGEST}", f"docker.io/library/busybox:1.36@{DIGEST}"),
])
def test_normalisation_matches_docker(text: str, normalised: str) -> None:
    assert str(parse_reference(text)) == normalised


def test_parts_and_familiar_form() -> None:
    ref = parse_reference(f"busybox@{DIGEST}")
    assert (ref.domain, ref.path, ref.tag, ref.digest) == ("docker.io", "library/busybox", "",
                                                           DIGEST)
    assert ref.repository == "docker.io/library/busybox"
    assert ref.digested == f"docker.io/library/busybox@{DIGEST}"
    assert ref.tagged == ""
    assert parse_reference("docker.io/library/busybox:latest").familiar() == "busybox:latest"
    assert parse_reference("quay.io/a/b:c").familiar() == "quay.io/a/b:c"


def test_no_default_tag_when_asked() -> None:
    assert parse_reference("busybox", default_tag=False).tag == ""


@pytest.mark.parametrize("text", [
    "", " busybox", "Busybox", "busybox:", "busybox@sha256:zz", "busybox@md5:abcd",
    "a//b", "busybox:bad/tag", "-busybox", "busybox:" + "x" * 129,
])
def test_invalid_references(text: str) -> None:
    with pytest.raises(InvalidReference):
        parse_reference(text)


def test_uppercase_message_is_dockers() -> None:
    with pytest.raises(InvalidReference, match=r"^invalid reference format: repository name "
                                               r"\(library/Busybox\) must be lowercase$"):
        parse_reference("Busybox")


@pytest.mark.parametrize(("text", "prefix"), [
    (DIGEST, DIGEST),
    ("ab" * 32, DIGEST),
    ("sha256:abababababab", "sha256:abababababab"),
    ("abababababab", "sha256:abababababab"),
    ("ababab", None),  # too short to be an id prefix
    ("busybox", None),
    ("sha256:xyz", None),
])
def test_image_id_prefix(text: str, prefix: str | None) -> None:
    assert image_id_prefix(text) == prefix
