"""Fixtures for the runtime tests: a hand-built busybox layer (session-wide) and a real OCI
runtime per test, rooted in tmp_path and torn down completely afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from runtime_testing import BUSYBOX, build_busybox_layer, teardown_runtime

from ephemera.kubelet.runtime import crun_works, select_kind
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
def crun_available(probe_root: Path) -> bool:
    return crun_works(probe_root)


@pytest.fixture(params=["runc", "crun"])
def runtime_kind(request: pytest.FixtureRequest, crun_available: bool, probe_root: Path) -> str:
    """runc, and crun when it works on this host. Where crun cannot run, the crun variant
    checks that "auto" falls back to runc and then runs the test with runc: no skips."""
    kind: str = request.param
    if kind == "crun" and not crun_available:
        assert select_kind("auto", probe_root) == "runc"
        return "runc"
    return kind


@pytest.fixture
async def runtime(runtime_kind: str, tmp_path: Path) -> AsyncIterator[OciRuntime]:
    rt = OciRuntime(runtime_kind, tmp_path / "root", f"node-{uuid.uuid4().hex[:6]}")
    try:
        yield rt
    finally:
        await teardown_runtime(rt)
