"""`ephemera up --demo` (what `make run` shows): a few real kubectl commands against the new
cluster, each printed with its output, so a user sees it working before using it. On a
restart of the same data dir the demo pod is already there (a restart is a node reboot, so
it comes back with its restart count one higher): the demo first waits until the node has
started it again, so that it shows this run's pod and not the last run's status."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESTART_WAIT = 60.0

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


PLUGIN = "kubectl-dynamic"


def plugin_dir() -> Path | None:
    """The directory of the `kubectl-dynamic` plugin installed with this package (the
    virtualenv's bin, next to its python), or None."""
    directory = Path(sys.executable).parent
    return directory if (directory / PLUGIN).is_file() else None


def plugin_path_hint() -> str | None:
    """The line that puts the `kubectl dynamic` plugin on PATH, when it is not there yet."""
    directory = plugin_dir()
    if directory is None:
        return None
    found = shutil.which(PLUGIN)
    if found is not None and Path(found).parent.resolve() == directory.resolve():
        return None
    return f"export PATH={shlex.quote(str(directory))}:$PATH"


def demo_commands(manifest: Path, with_plugin: bool = False) -> list[list[str]]:
    commands = [
        ["get", "namespaces"],
        ["apply", "-f", str(manifest)],
        ["get", "configmaps"],
        ["wait", "--for=condition=Ready", "pod/demo", "--timeout=60s"],
        ["get", "pods", "-o", "wide"],
        ["logs", "demo"],
        ["get", "pod", "demo", "-o", "yaml"],
    ]
    if with_plugin:  # KEP-6395: the pod's volumes as desired, allocated and actuated
        commands.append(["dynamic", "status", "demo"])
    return commands


async def _kubectl_output(base: list[str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *base, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _at_or_after(stamp: Any, since: dt.datetime) -> bool:
    with contextlib.suppress(ValueError, TypeError):
        return dt.datetime.fromisoformat(str(stamp)) >= since
    return False


def started_again(pod: dict[str, Any], since: dt.datetime) -> bool:
    """The pod is Ready and this start's kubelet made it so (RFC 3339, seconds): its Ready
    condition turned True at or after `since`, or every container runs since then (a pod
    whose containers were started again before the kubelet wrote a not-ready status keeps
    the last run's transition time)."""
    status = pod.get("status") or {}
    ready = next((c for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return False
    if _at_or_after(ready.get("lastTransitionTime"), since):
        return True
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(
        _at_or_after(((c.get("state") or {}).get("running") or {}).get("startedAt"), since)
        for c in containers)


async def _wait_for_restarted_pod(base: list[str], since: dt.datetime,
                                  say: Callable[[str], None]) -> None:
    """After a restart the demo pod still shows the last run's status until the kubelet has
    started it again: wait for that (at most `RESTART_WAIT` seconds), so that what the demo
    shows is this run's."""
    code, out = await _kubectl_output(base, "get", "pod", "demo", "-n", "default",
                                      "--ignore-not-found", "-o", "json")
    if code or not out.strip():
        return  # a first start: `kubectl wait` below shows the pod starting
    say("")
    say("(the demo pod is left from the last run: waiting for the node to start it again)")
    deadline = time.monotonic() + RESTART_WAIT
    while time.monotonic() < deadline:
        with contextlib.suppress(ValueError):
            if started_again(json.loads(out), since):
                return
        await asyncio.sleep(0.5)
        code, out = await _kubectl_output(base, "get", "pod", "demo", "-n", "default",
                                          "-o", "json")


async def run_demo(data_dir: Path, kubeconfig: Path, say: Callable[[str], None],
                   since: dt.datetime | None = None) -> None:
    """Run the demo's kubectl commands; `since` is when this start's kubelet started (a demo
    pod left from the last run is waited for until the kubelet has started it again)."""
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
    if since is not None:
        await _wait_for_restarted_pod(base, since, say)
    # kubectl finds the `dynamic` plugin on PATH: the virtualenv's bin goes first.
    directory = plugin_dir()
    # kubectl runs a plugin only when no flag comes before its name: the plugin reads the
    # kubeconfig from $KUBECONFIG.
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    if directory is not None:
        env["PATH"] = f"{directory}{os.pathsep}{env.get('PATH', '')}"
    for args in demo_commands(manifest, with_plugin=directory is not None):
        say("")
        say("$ kubectl " + " ".join(shlex.quote(a) for a in args))
        argv = [kubectl, *args] if args[0] == "dynamic" else [*base, *args]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        text = out.decode(errors="replace").rstrip("\n")
        if text:
            say(text)
        if proc.returncode:
            say(f"(kubectl exited with code {proc.returncode})")
