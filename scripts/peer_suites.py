"""Run two peers' client test suites against a fresh `ephemera up`: the official Python
client's e2e tests (kubernetes-client/python `kubernetes/e2e_test` and
`kubernetes/aio/e2e_test`) and kr8s' suite (`kr8s/tests`), as
/work/shared/reference/peer-suites.md describes; print each suite's pytest summary.

What this script does not fetch (they are other projects' files): a checkout of each
repository and a virtualenv for each suite, given on the command line:

    python scripts/peer_suites.py --data-dir /tmp/peers/data \\
        --python-client /tmp/peers/venv-k8s/bin/python \\
        --kr8s-checkout /tmp/peers/kr8s --kr8s-python /tmp/peers/venv-kr8s/bin/python

- the Python client's venv has `kubernetes` (the release matching the tests), `pytest`,
  `pytest-timeout` and `pytest-asyncio`, and the two `e2e_test` folders copied into its
  installed package (the wheel leaves them out);
- kr8s' venv has the kr8s release (for its dependencies and its version, written into the
  checkout's `kr8s/_version.py` that hatch-vcs would make) and its test dependencies
  (`kubernetes==36.0.3` for its cast test); its tests run from the checkout (`PYTHONPATH`).

Nodes pull from no registry: the busybox base image is built (`ephemera images build-base`)
and the other images the suites name are stand-ins built here from the
busybox base layer and imported under those names: `nginx[:TAG]` runs busybox `httpd` on
port 80 over `/usr/share/nginx/html`; `pause`, `ubuntu` sleep; all exit on TERM; `python`
adds the host's Debian Python (/usr/bin/python3.11, its standard library and the shared
libraries they load) to busybox, for the client's `test_portforward_raw`, which runs a
Python script in it (left out when the host has no such Python).

kr8s expects a kind cluster through `pytest-kind`'s `KindCluster`: a stand-in `pytest_kind`
package (written to the data dir, put first on `PYTHONPATH`) whose `create()`/`delete()` do
nothing, whose `kubeconfig_path` is ephemera's and whose `kubectl_path` and `kubectl()` are
the real kubectl;
a small plugin registers `--keep-cluster`; coverage options are dropped from `addopts`.

`-k EXPR` runs only the tests pytest's `-k` selects, in both suites (to rerun failures).
`--kind-system-pod` runs a pause pod in kube-system before kr8s' suite, as a kind cluster
always has pods there: a diagnostic for the kr8s tests that list the cluster's pods and
expect one (docs/peer-suites.md reports the runs without it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from ephemera.kubelet.images.base import (
    DEFAULT_PATH,
    MEDIA_TYPE_CONFIG,
    MEDIA_TYPE_LAYER,
    MEDIA_TYPE_MANIFEST,
    busybox_layer,
    canonical_json,
    digest_of,
    host_architecture,
)

SLEEP = "trap 'exit 0' TERM; sleep 2147483647 & wait"
NGINX = ("trap 'exit 0' TERM; httpd -f -p 80 -h /usr/share/nginx/html & wait")
INDEX = b"<html><body><h1>Welcome to nginx!</h1></body></html>\n"
STAND_INS = {
    "docker.io/library/nginx:latest": NGINX,
    "docker.io/library/nginx:1.7.9": NGINX,
    "docker.io/library/nginx:1.10": NGINX,
    "docker.io/library/nginx:1.14.2": NGINX,
    "docker.io/library/nginx:1.15.4": NGINX,
    "docker.io/library/ubuntu:latest": SLEEP,
    "registry.k8s.io/pause:3.9": SLEEP,
    "k8s.gcr.io/pause:2.0": SLEEP,
}
HOST_PYTHON = Path("/usr/bin/python3.11")  # Debian's, for the `python` stand-in
SUMMARY = re.compile(r"^=+ (.*\d+ (passed|failed).*) in [\d.]+s")

PYTEST_KIND = '''\
"""Stand-in for pytest-kind's KindCluster: the ephemera cluster is already up."""
import os
import shutil
import subprocess
from pathlib import Path


class KindCluster:
    def __init__(self, name="pytest-kind", image=None, **kwargs):
        self.name = name
        self.kubeconfig_path = Path(os.environ["EPHEMERA_KUBECONFIG"])
        self.kubectl_path = Path(shutil.which("kubectl"))

    def create(self, *args, **kwargs):
        pass

    def delete(self):
        pass

    def kubectl(self, *args, **kwargs):
        return subprocess.check_output(
            ["kubectl", "--kubeconfig", str(self.kubeconfig_path), *args],
            text=True, **kwargs)
'''
KEEP_CLUSTER_PLUGIN = '''\
def pytest_addoption(parser):
    parser.addoption("--keep-cluster", action="store_true", default=False)
'''


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted({str(Path(n).parent) for n in files} - {"."}):
            parts = Path(directory).parts
            for i in range(1, len(parts) + 1):
                name = "/".join(parts[:i]) + "/"
                if name not in tar.getnames() and name.rstrip("/") not in tar.getnames():
                    info = tarfile.TarInfo(name)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, BytesIO(data))
    return buf.getvalue()


def _write_blob(layout: Path, data: bytes, media_type: str) -> dict[str, Any]:
    digest = digest_of(data)
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def stand_in_layout(layout: Path, script: str, base: bytes, *more: bytes) -> None:
    """An OCI layout of busybox plus a layer with nginx's document root (and `more` layers),
    running `script`."""
    extra = _tar({"usr/share/nginx/html/index.html": (INDEX, 0o644)})
    layers = [_write_blob(layout, layer, MEDIA_TYPE_LAYER) for layer in (base, extra, *more)]
    config = canonical_json({
        "architecture": host_architecture(), "os": "linux",
        "config": {"Env": [DEFAULT_PATH], "Cmd": ["/bin/sh", "-c", script]},
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}})
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
        "config": _write_blob(layout, config, MEDIA_TYPE_CONFIG), "layers": layers})
    index = {"schemaVersion": 2,
             "manifests": [_write_blob(layout, manifest, MEDIA_TYPE_MANIFEST)]}
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')


def _shared_libraries(binaries: list[Path]) -> set[Path]:
    """The shared libraries (and the loader) `ldd` names for `binaries`."""
    found: set[Path] = set()
    out = subprocess.run(["ldd", *map(str, binaries)], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/") and Path(word).exists():
                found.add(Path(word))
    return found


def python_layer(python: Path = HOST_PYTHON) -> bytes:
    """The host's Debian Python as a layer: the interpreter, its standard library (without
    tests and installed packages) and the shared libraries they load, at their paths."""
    stdlib = Path("/usr/lib") / python.name
    skip = {"test", "site-packages", "dist-packages", "__pycache__", "idlelib", "tkinter"}
    files = [p for p in stdlib.rglob("*")
             if p.is_file() and not skip & set(p.relative_to(stdlib).parts)]
    modules = [p for p in files if p.suffix == ".so"]
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for path in sorted({python, *files, *_shared_libraries([python, *modules])}):
            name = str(path).lstrip("/")
            parts = Path(name).parts
            for i in range(1, len(parts)):
                directory = "/".join(parts[:i])
                if directory not in made and directory not in ("bin", "usr"):
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    made.add(directory)
            data = path.read_bytes()  # the file a symlink names, at the symlink's path
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), path.stat().st_mode & 0o777
            tar.addfile(info, BytesIO(data))
        for alias in ("python", "python3"):
            info = tarfile.TarInfo(f"usr/bin/{alias}")
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, python.name, 0o777
            tar.addfile(info)
    return buf.getvalue()


def import_stand_ins(ephemera: Path, data_dir: Path) -> None:
    subprocess.run([str(ephemera), "images", "build-base", "--root-dir",
                    str(data_dir / "kubelet")], check=True, stdout=subprocess.DEVNULL)
    base = busybox_layer()
    for ref, script in STAND_INS.items():
        layout = data_dir / "stand-ins" / re.sub(r"[^a-z0-9.]+", "-", ref)
        stand_in_layout(layout, script, base)
        _import(ephemera, data_dir, ref, layout)
    if HOST_PYTHON.exists():
        layout = data_dir / "stand-ins" / "python"
        stand_in_layout(layout, "exec python3", base, python_layer())
        _import(ephemera, data_dir, "docker.io/library/python:latest", layout)


def _import(ephemera: Path, data_dir: Path, ref: str, layout: Path) -> None:
    subprocess.run([str(ephemera), "images", "import", "--root-dir",
                    str(data_dir / "kubelet"), "--name", ref, str(layout)],
                   check=True, stdout=subprocess.DEVNULL)


def start_cluster(ephemera: Path, data_dir: Path) -> subprocess.Popen[bytes]:
    log = (data_dir / "up.log").open("wb")
    process = subprocess.Popen([str(ephemera), "up", "--data-dir", str(data_dir)],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"ephemera up exited {process.returncode}: see {log.name}")
        if b"is Ready" in (data_dir / "up.log").read_bytes():
            return process
        time.sleep(1)
    raise SystemExit("the node did not become Ready in 180 s")


def kind_system_pod(env: dict[str, str]) -> None:
    """A running pod in kube-system, where a kind cluster runs CoreDNS and its control plane
    (ephemera's components are processes): 27 of kr8s' tests list pods across the cluster,
    or in kube-system, and expect one."""
    kubectl = ["kubectl", "-n", "kube-system"]
    subprocess.run([*kubectl, "run", "kind-system-stand-in",
                    "--image=registry.k8s.io/pause:3.9"], env=env, check=True)
    subprocess.run([*kubectl, "wait", "--for=condition=Ready", "pod/kind-system-stand-in",
                    "--timeout=120s"], env=env, check=True)


def run_suite(name: str, argv: list[str], cwd: Path, env: dict[str, str], out: Path
              ) -> str:
    print(f"== {name}: {' '.join(argv)}", flush=True)
    with out.open("w") as fh:
        subprocess.run(argv, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                       check=False)
    lines = out.read_text().splitlines()
    summary = next((m.group(1) for line in reversed(lines) if (m := SUMMARY.match(line))),
                   "no summary (see the log)")
    print(f"{name}: {summary} (log: {out})", flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--python-client", type=Path, help="the client suite's python")
    parser.add_argument("--kr8s-checkout", type=Path)
    parser.add_argument("--kr8s-python", type=Path)
    parser.add_argument("--timeout", default="120", help="pytest-timeout per test")
    parser.add_argument("--kind-system-pod", action="store_true",
                        help="before kr8s' suite, run a pause pod in kube-system as kind's "
                             "clusters always have pods there (a diagnostic: off by default)")
    parser.add_argument("-k", dest="select", default="",
                        help="run only the tests pytest's -k EXPR selects (in both suites)")
    args = parser.parse_args()
    select = ["-k", args.select] if args.select else []
    ephemera = Path(sys.executable).with_name("ephemera")
    data_dir = args.data_dir.resolve()
    data_dir.mkdir(parents=True)
    import_stand_ins(ephemera, data_dir)
    cluster = start_cluster(ephemera, data_dir)
    kubeconfig = data_dir / "kubeconfig"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "EPHEMERA_KUBECONFIG": str(kubeconfig)}
    try:
        if args.python_client:
            work = data_dir / "python-client"
            yaml_dir = work / "kubernetes" / "e2e_test"
            yaml_dir.mkdir(parents=True)
            package = subprocess.run(
                [str(args.python_client), "-c",
                 "import kubernetes, os; print(os.path.dirname(kubernetes.__file__))"],
                check=True, capture_output=True, text=True).stdout.strip()
            (yaml_dir / "test_yaml").symlink_to(Path(package) / "e2e_test" / "test_yaml")
            run_suite("python client", [str(args.python_client), "-m", "pytest", "-p",
                                        "no:cacheprovider", "--pyargs",
                                        "kubernetes.e2e_test", "kubernetes.aio.e2e_test",
                                        f"--timeout={args.timeout}", "-rfE", *select],
                      work, env, data_dir / "python-client.log")
        if args.kr8s_checkout and args.kr8s_python:
            shim = data_dir / "kr8s-shim"
            (shim / "pytest_kind").mkdir(parents=True)
            (shim / "pytest_kind" / "__init__.py").write_text("")
            (shim / "pytest_kind" / "cluster.py").write_text(PYTEST_KIND)
            (shim / "keep_cluster_option.py").write_text(KEEP_CLUSTER_PLUGIN)
            checkout = args.kr8s_checkout.resolve()
            version = checkout / "kr8s" / "_version.py"
            if not version.exists():  # hatch-vcs writes it at build time: the release's
                installed = subprocess.run(
                    [str(args.kr8s_python), "-c",
                     "import importlib.metadata as m; print(m.version('kr8s'))"],
                    check=True, capture_output=True, text=True).stdout.strip()
                version.write_text(f"__version__ = {installed!r}\n")
            if args.kind_system_pod:
                kind_system_pod(env)
            kr8s_env = {**env, "PYTHONPATH": f"{shim}:{checkout}"}
            run_suite("kr8s", [str(args.kr8s_python), "-m", "pytest", "-p",
                               "keep_cluster_option", "-p", "no:cacheprovider", "-o",
                               "addopts=--keep-cluster", f"--timeout={args.timeout}",
                               "-rfE", *select, "kr8s/tests"],
                      checkout, kr8s_env, data_dir / "kr8s.log")
    finally:
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(120)
        except subprocess.TimeoutExpired:
            cluster.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
