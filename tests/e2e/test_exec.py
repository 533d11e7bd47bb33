"""exec, attach and cp in a real `ephemera up` with the real OCI runtime (runc, and crun),
met through the real kubectl (WebSocket, `v5.channel.k8s.io`, through the apiserver to the
kubelet) and the official Python client's `stream()`: a mounted ConfigMap file read with
`kubectl exec`, exit codes passed back, a client that leaves ending the exec, stdin piped in,
a terminal (`-it`, with its size), `kubectl attach` to a container's stdin and output,
`kubectl cp` of a file and a directory in and back out.

One cluster per runtime and one long-running busybox pod that the exec tests share (they only
run commands in it); attach makes pods of its own."""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster, Kubectl, start_cluster

from ephemera.kubelet.runtime import crun_probe

pytestmark = pytest.mark.e2e

WAIT = 60.0
NODE = "exec-node"
CONFIG_TEXT = "hello from a configmap"


def _wait(check: Any, what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


@pytest.fixture(scope="module", params=["runc", "crun"])
def exec_cluster(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The module's cluster, on runc and on crun (the crun variant fails, with crun's error,
    where crun fails its probe)."""
    runtime: str = request.param
    base = tmp_path_factory.mktemp(f"exec-cluster-{runtime}")
    if runtime == "crun":
        error = crun_probe(base)
        if error is not None:
            pytest.fail(f"crun failed its probe: {error}")
    running = start_cluster(base / "data", base / "home",
                            ["--node-name", NODE, "--runtime", runtime])
    try:
        yield running
        running.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1",
                        "--wait=true", timeout=120)
        kubelet_dir = running.data_dir / "kubelet"
        _wait(lambda: not _mounts_under(kubelet_dir), "no mounts left")
    finally:
        code = running.stop()
        assert code == 0, f"ephemera up exited {code}\n{running.output}"


@pytest.fixture(scope="module")
def k(exec_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl in the module's namespace, where the pod `box` runs with a ConfigMap mounted
    at /etc/config."""
    runner = Kubectl(exec_cluster, tmp_path_factory.mktemp("exec-home"), "exec-tests")
    runner("create", "namespace", "exec-tests")
    create(runner,
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
            "data": {"key": CONFIG_TEXT}},
           {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "box"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", "while true; do sleep 1; done"],
                                     "volumeMounts": [{"name": "cfg",
                                                       "mountPath": "/etc/config"}]}],
                     "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}})
    runner("wait", "--for=condition=Ready", "pod/box", f"--timeout={int(WAIT)}s",
           timeout=WAIT + 10)
    return runner


def create(k: Kubectl, *objects: dict[str, Any]) -> None:
    k("create", "-f", "-", input=yaml.safe_dump_all(objects))


def kubectl_bytes(k: Kubectl, *args: str, stdin: bytes = b"",
                  timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    argv, env = k.cluster.kubectl_command(["-n", "exec-tests", *args], k.home)
    return subprocess.run(argv, env=env, input=stdin, capture_output=True, timeout=timeout,
                          check=False)


def test_exec_reads_a_mounted_configmap_file(k: Kubectl) -> None:
    result = k("exec", "box", "--", "cat", "/etc/config/key")
    assert result.stdout == CONFIG_TEXT
    # the request went over WebSocket with the v5 channel protocol
    verbose = k("exec", "-v=7", "box", "--", "true")
    assert "The subprotocol is v5.channel.k8s.io" in verbose.stderr


def test_exec_passes_the_exit_code_and_both_streams_back(k: Kubectl) -> None:
    result = k("exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert result.returncode == 3
    assert result.stdout == "out\n"
    assert result.stderr.splitlines() == ["err", "command terminated with exit code 3"]
    killed = k("exec", "box", "--", "sh", "-c", "kill -9 $$", check=False)
    assert killed.returncode == 137


def test_a_client_that_leaves_ends_the_exec(k: Kubectl) -> None:
    with k.stream("exec", "box", "--", "sh", "-c", "echo started; exec sleep 4321") as running:
        running.wait_for_line(lambda line: line == "started")
        assert "sleep 4321" in k("exec", "box", "--", "ps").stdout
    _wait(lambda: "sleep 4321" not in k("exec", "box", "--", "ps").stdout,
          "the exec'd process to be killed")


def test_exec_with_stdin_piped(k: Kubectl) -> None:
    data = os.urandom(1 << 20) + b"end"
    result = kubectl_bytes(k, "exec", "-i", "box", "--", "cat", stdin=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    counted = k("exec", "-i", "box", "--", "wc", "-l", input="a\nb\nc\n")
    assert counted.stdout.strip() == "3"


def test_exec_with_a_terminal(k: Kubectl) -> None:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    argv, env = k.cluster.kubectl_command(["-n", "exec-tests", "exec", "-it", "box", "--",
                                           "sh"], k.home)
    process = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True)
    os.close(slave)
    output = b""

    def read_until(marker: bytes, timeout: float = 30) -> None:
        nonlocal output
        deadline = time.monotonic() + timeout
        while marker not in output:
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"no {marker!r} on the terminal; got {output!r}")
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    output += os.read(master, 4096)
                except OSError:  # EIO: kubectl has gone
                    break

    try:
        read_until(b"# ")  # the shell's prompt
        os.write(master, b"echo $((6*7)); stty size; tty\n")
        read_until(b"/dev/pts/")
        os.write(master, b"exit 5\n")
        assert process.wait(30) == 5
        read_until(b"command terminated with exit code 5")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    lines = output.decode(errors="replace").splitlines()
    assert "42\r" in lines or "42" in lines, output
    assert any(line.strip() == "33 111" for line in lines), output  # the terminal size


def test_attach_to_stdin_and_output(k: Kubectl) -> None:
    create(k,
           {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "catter"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "stdin": True,
                                     "stdinOnce": True,
                                     "command": ["sh", "-c", "cat; echo cat ended"]}]}},
           {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "command": [
                         "sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); "
                                     "sleep 0.2; done"]}]}})
    k("wait", "--for=condition=Ready", "pod/catter", "pod/ticker", f"--timeout={int(WAIT)}s",
      timeout=WAIT + 10)
    # stdin reaches the container; closing it (stdinOnce) ends cat and the attach
    result = k("attach", "-i", "catter", input="hello\nworld\n", timeout=30)
    assert result.stdout == "hello\nworld\ncat ended\n"
    _wait(lambda: json.loads(k("get", "pod", "catter", "-o", "json").stdout)["status"][
        "phase"] == "Succeeded", "catter to succeed")
    # output streams while the container runs; leaving does not stop it
    with k.stream("attach", "ticker") as attached:
        first = attached.wait_for_line(lambda line: line.startswith("tick "))
        later = attached.wait_for_line(
            lambda line: line.startswith("tick ") and int(line.split()[1]) > int(
                first.split()[1]))
        assert later
    after = k("logs", "ticker").stdout.splitlines()
    _wait(lambda: len(k("logs", "ticker").stdout.splitlines()) > len(after),
          "the ticker to keep running after the attach ended")


def test_cp_in_and_out(k: Kubectl, tmp_path: Path) -> None:
    payload = os.urandom(300_000)
    source = tmp_path / "blob.bin"
    source.write_bytes(payload)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("one\n")
    (tree / "sub" / "b.txt").write_text("two\n")
    k("cp", str(source), "box:/tmp/blob.bin")
    assert k("exec", "box", "--", "wc", "-c", "/tmp/blob.bin").stdout.split()[0] == "300000"
    back = tmp_path / "back.bin"
    k("cp", "box:/tmp/blob.bin", str(back))
    assert back.read_bytes() == payload
    k("cp", str(tree), "box:/tmp/tree")
    tree_back = tmp_path / "tree-back"
    k("cp", "box:/tmp/tree", str(tree_back))
    assert (tree_back / "a.txt").read_text() == "one\n"
    assert (tree_back / "sub" / "b.txt").read_text() == "two\n"


def test_python_client_stream(k: Kubectl) -> None:
    from kubernetes import client, config
    from kubernetes.stream import stream

    api = client.CoreV1Api(config.new_client_from_config(str(k.cluster.kubeconfig)))
    resp = stream(api.connect_get_namespaced_pod_exec, "box", "exec-tests",
                  command=["sh", "-c", "cat /etc/config/key; echo oops >&2; exit 7"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=30)
    assert resp.read_stdout() == CONFIG_TEXT
    assert resp.read_stderr() == "oops\n"
    assert resp.returncode == 7
    echo = stream(api.connect_get_namespaced_pod_exec, "box", "exec-tests",
                  command=["cat"], stderr=True, stdin=True, stdout=True, tty=False,
                  _preload_content=False)
    echo.write_stdin("piped in\n")
    echo.close_channel(0)  # v5: end of stdin
    echo.run_forever(timeout=30)
    assert echo.read_stdout() == "piped in\n"
    assert echo.returncode == 0
    whole = stream(api.connect_get_namespaced_pod_exec, "box", "exec-tests",
                   command=["echo", "hi"], stderr=True, stdin=False, stdout=True, tty=False)
    assert whole == "hi\n"
