"""Fixtures for the runtime tests: a hand-built busybox layer (session-wide) and a real OCI
runtime per test, rooted in tmp_path and torn down completely afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from runtime_testing import BUSYBOX, build_busybox_layer, teardown_runtime

from ephemera.kubelet.runtime import crun_probe
from ephemera.kubelet.runtime.oci import OciRuntime


@pytest.fixture(scope="session")
def busybox_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not os.path.exists(BUSYBOX):
        pytest.fail("busybox-static is not installed (Debian package busybox-static)")
    return build_busybox_layer(tmp_path_factory.mktemp("busybox") / "layer")


@pytest.fixture(scope="session")
def probe_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe-root")


@pytest.fixture(scope="session")
def crun_error(probe_root: Path) -> str | None:
    """Why crun cannot run a container here (its own error), or None."""
    return crun_probe(probe_root)


@pytest.fixture(scope="session")
def crun_available(crun_error: str | None) -> bool:
    return crun_error is None


@pytest.fixture(params=["runc", "crun"])
def runtime_kind(request: pytest.FixtureRequest, crun_error: str | None) -> str:
    """runc, then crun. The crun variant fails, showing crun's error, where crun fails its
    probe: it never runs on runc instead."""
    kind: str = request.param
    if kind == "crun" and crun_error is not None:
        pytest.fail(f"crun failed its probe: {crun_error}")
    return kind


@pytest.fixture
async def runtime(runtime_kind: str, tmp_path: Path) -> AsyncIterator[OciRuntime]:
    rt = OciRuntime(runtime_kind, tmp_path / "root", f"node-{uuid.uuid4().hex[:6]}")
    try:
        yield rt
    finally:
        await teardown_runtime(rt)
