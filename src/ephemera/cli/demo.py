"""`ephemera up --demo` (what `make run` shows): a few real kubectl commands against the new
cluster, each printed with its output, so a user sees it working before using it."""

from __future__ import annotations

import asyncio
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

DEMO_MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo-config
  namespace: default
data:
  greeting: hello from ephemera
---
apiVersion: v1
kind: Pod
metadata:
  name: demo
  namespace: default
  labels:
    app: demo
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "cat /config/greeting; echo; sleep 3600"]
    volumeMounts:
    - name: config
      mountPath: /config
  volumes:
  - name: config
    configMap:
      name: demo-config
"""


def demo_commands(manifest: Path) -> list[list[str]]:
    return [
        ["get", "namespaces"],
        ["apply", "-f", str(manifest)],
        ["get", "configmaps"],
        ["wait", "--for=condition=Ready", "pod/demo", "--timeout=60s"],
        ["get", "pods", "-o", "wide"],
        ["logs", "demo"],
        ["get", "pod", "demo", "-o", "yaml"],
    ]


async def run_demo(data_dir: Path, kubeconfig: Path, say: Callable[[str], None]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        say("kubectl is not on PATH; skipping the demo")
        return
    manifest = data_dir / "demo" / "demo.yaml"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(DEMO_MANIFEST)
    # kubectl caches discovery per host:port; a cache of its own keeps a port reused from an
    # earlier cluster from showing stale resources.
    base = [kubectl, "--kubeconfig", str(kubeconfig), "--cache-dir",
            str(data_dir / "demo" / "kube-cache")]
    for args in demo_commands(manifest):
        say("")
        say("$ kubectl " + " ".join(shlex.quote(a) for a in args))
        proc = await asyncio.create_subprocess_exec(
            *base, *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        text = out.decode(errors="replace").rstrip("\n")
        if text:
            say(text)
        if proc.returncode:
            say(f"(kubectl exited with code {proc.returncode})")
