"""`ephemera apiserver --authorization-mode`: a static-token user without any RBAC binding is
refused with upstream's 403 under the default (Node,RBAC) and let through under
`AlwaysAllow`; an unknown mode is a usage error. `--anonymous-auth`: a request without
credentials reads `/version` as `system:anonymous` by default, and gets 401 with
`--anonymous-auth=false`."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TOKEN = "bob-token-0123456789"
SECRETS = "/api/v1/namespaces/default/secrets"


@contextmanager
def apiserver(data_dir: Path, *flags: str) -> Iterator[str]:
    """`ephemera apiserver` on a free port with a token file naming bob; its URL."""
    data_dir.mkdir(parents=True)
    tokens = data_dir / "tokens.csv"
    tokens.write_text(f'{TOKEN},bob,bob-uid,""\n')
    port_file = data_dir / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(data_dir),
         "--port", "0", "--port-file", str(port_file), "--token-auth-file", str(tokens),
         *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the apiserver did not start"
            time.sleep(0.05)
        yield f"https://127.0.0.1:{port_file.read_text().strip()}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def get_as_bob(url: str, ca: Path) -> tuple[int, dict[str, object]]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url + SECRETS, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_default_modes_refuse_and_always_allow_lets_through(tmp_path: Path) -> None:
    with apiserver(tmp_path / "default") as url:
        code, body = get_as_bob(url, tmp_path / "default" / "pki" / "ca.crt")
    assert (code, body["message"]) == (
        403, 'secrets is forbidden: User "bob" cannot list resource "secrets" in API group "" '
             'in the namespace "default"')
    with apiserver(tmp_path / "allow", "--authorization-mode", "AlwaysAllow") as url:
        code, body = get_as_bob(url, tmp_path / "allow" / "pki" / "ca.crt")
    assert (code, body["kind"]) == (200, "SecretList")


def test_an_unknown_mode_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(tmp_path),
         "--authorization-mode", "Node,Webhook"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "ephemera apiserver: error: argument --authorization-mode: 'Node,Webhook': a "
        "comma-separated list of AlwaysAllow, AlwaysDeny, Node, RBAC")


def get_version(url: str, ca: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(url + "/version", context=context, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_anonymous_auth_flag(tmp_path: Path) -> None:
    with apiserver(tmp_path / "default") as url:
        assert get_version(url, tmp_path / "default" / "pki" / "ca.crt") == 200
    with apiserver(tmp_path / "off", "--anonymous-auth=false") as url:
        assert get_version(url, tmp_path / "off" / "pki" / "ca.crt") == 401
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "apiserver", "--data-dir", str(tmp_path),
         "--anonymous-auth=maybe"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "ephemera apiserver: error: argument --anonymous-auth: strconv.ParseBool: parsing "
        '"maybe": invalid syntax')
