"""The runtime seam, shaped like the CRI (`base`), and its backends: `oci` (runc or crun on
OCI bundles with an overlayfs rootfs) and `fake` (no processes; status only, for fast tests
and many simulated nodes). Only this package runs runc or crun.

`make_runtime(kind, root, node_name)`: kind "runc", "crun", "fake" or "auto". "auto" picks
crun when a probe container runs with it on this host (with the hybrid-cgroup workaround the
OCI backend uses; the probe runs once per process and root), else runc, logging why crun was
passed over (`crun_probe` returns crun's own error).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ephemera.kubelet.runtime.base import RuntimeError_, RuntimeService

__all__ = ["RuntimeService", "crun_probe", "crun_works", "make_runtime", "select_kind"]

log = logging.getLogger("ephemera.kubelet")

# The probe's answer per root: None (crun works) or why it does not.
_probe_results: dict[str, str | None] = {}
# The most of crun's output a probe failure quotes.
_PROBE_OUTPUT_LIMIT = 2000


def _probe_bundle(bundle: Path) -> None:
    """A bundle whose rootfs borrows the host's /usr (and /bin, /lib... as symlinks or binds):
    enough to run /bin/true with the same namespaces as a real container."""
    rootfs = bundle / "rootfs"
    for name in ("proc", "dev", "sys", "tmp"):
        (rootfs / name).mkdir(parents=True)
    mounts: list[dict[str, object]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["mode=755"]},
    ]
    for name in ("usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            (rootfs / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            mounts.append({"destination": f"/{name}", "type": "bind", "source": str(host),
                           "options": ["rbind", "ro"]})
    import json

    spec = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/true"],
                    "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
        "root": {"path": str(rootfs)},
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts",
                                                        "network")]},
    }
    (bundle / "config.json").write_text(json.dumps(spec))


def crun_probe(root: Path) -> str | None:
    """Run a probe container with crun, the way the OCI backend runs it: None when it ran,
    else why not (crun's own output and exit code, a timeout, or crun missing)."""
    binary = shutil.which("crun")
    if not binary:
        return "crun is not installed (no crun on PATH)"
    key = str(Path(root).resolve())
    if key in _probe_results:
        return _probe_results[key]
    from ephemera.kubelet.runtime import cgroups
    from ephemera.kubelet.runtime.oci import shim_command

    state = Path(root) / "runtime" / "crun-probe-state"
    state.mkdir(parents=True, exist_ok=True)
    error: str | None
    with tempfile.TemporaryDirectory(prefix="crun-probe-", dir=Path(root) / "runtime") as tmp:
        bundle = Path(tmp)
        _probe_bundle(bundle)
        argv = [binary, "--root", str(state), "--cgroup-manager=disabled", "run", "--bundle",
                str(bundle), f"probe-{os.getpid()}"]
        output = bundle / "out.log"
        options = [f"argv={a}" for a in argv] + [f"out={output}"]
        if cgroups.is_hybrid():
            options.append("hide-cgroup2=1")
        try:
            result = subprocess.run(shim_command("probe", *options),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, timeout=30)
            error = None
            if result.returncode != 0:
                said = _read_tail(output) or result.stderr.decode(errors="replace").strip()
                error = (f"{' '.join(argv)} exited with code {result.returncode}: "
                         f"{said or '(no output)'}")
        except subprocess.TimeoutExpired:
            error = f"{' '.join(argv)} did not finish within 30 s"
        with contextlib.suppress(OSError):
            subprocess.run([binary, "--root", str(state), "delete", "--force",
                            f"probe-{os.getpid()}"], capture_output=True, timeout=30)
    shutil.rmtree(state, ignore_errors=True)
    _probe_results[key] = error
    return error


def _read_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text[-_PROBE_OUTPUT_LIMIT:]


def crun_works(root: Path) -> bool:
    """Whether crun runs a probe container here (`crun_probe` says why not)."""
    return crun_probe(root) is None


def select_kind(kind: str, root: Path) -> str:
    """Resolve "auto" to "crun" or "runc"."""
    if kind != "auto":
        return kind
    error = crun_probe(root)
    if error is None:
        return "crun"
    if shutil.which("runc"):
        log.warning("runtime auto: using runc, crun failed its probe: %s", error)
        return "runc"
    raise RuntimeError_(f"no working OCI runtime: runc is missing and crun failed its probe: "
                        f"{error}")


def make_runtime(kind: str, root: Path, node_name: str) -> RuntimeService:
    """The runtime for a kubelet rooted at `root`: "runc", "crun", "fake" or "auto"."""
    root = Path(root)
    if kind == "fake":
        from ephemera.kubelet.runtime.fake import FakeRuntime

        return FakeRuntime(root, node_name)
    if kind not in ("auto", "runc", "crun"):
        raise ValueError(f"unknown runtime {kind!r}: use auto, runc, crun or fake")
    from ephemera.kubelet.runtime.oci import OciRuntime

    (root / "runtime").mkdir(parents=True, exist_ok=True)
    return OciRuntime(select_kind(kind, root), root, node_name)
