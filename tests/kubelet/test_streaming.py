"""exec and attach: the channel-protocol codec and outcomes (`ephemera.kubelet.streaming`), and
whole sessions through the in-process apiserver's `pods/exec` and `pods/attach` relay to a
kubelet on the fake runtime (WebSocket on both legs, subprotocol negotiated end to end)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubelet_harness import Harness, pod, running_kubelet
from multidict import MultiDict

from ephemera.kubelet.streaming import (
    PROTOCOLS,
    StreamLookupError,
    exit_status,
    internal_error_status,
    negotiate,
    parse_resize,
    parse_stream_options,
    success_status,
)

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"

# -- codec ------------------------------------------------------------------------------------


def test_binary_frames_carry_the_channel_in_the_first_byte() -> None:
    v5 = PROTOCOLS[V5]
    assert v5.encode(1, b"out") == b"\x01out"
    assert v5.decode(b"\x00in") == (0, b"in")
    assert v5.decode(b"\xff\x00") == (255, b"\x00")
    assert v5.close_signal and not PROTOCOLS[V4].close_signal
    with pytest.raises(ValueError):
        v5.decode(b"")


def test_base64_frames_are_text_with_an_ascii_channel_digit() -> None:
    b64 = PROTOCOLS["v4.base64.channel.k8s.io"]
    assert b64.encode(2, b"\x00err") == "2AGVycg=="
    assert b64.decode("0aGk=") == (0, b"hi")
    assert b64.encode(1, b"") == "1"
    with pytest.raises(ValueError):
        b64.decode("0***")


def test_negotiation_takes_the_clients_first_served_protocol() -> None:
    assert negotiate([V5, V4]) is PROTOCOLS[V5]
    assert negotiate(["x.example", V4]) is PROTOCOLS[V4]
    assert negotiate([]) is PROTOCOLS["channel.k8s.io"]
    assert negotiate(["x.example"]) is None


def test_the_error_channel_says_status_json_from_v4_and_text_before() -> None:
    failure = exit_status(3, ["sh", "-c", "exit 3"])
    assert failure == {
        "metadata": {}, "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command "
                   "[sh -c exit 3], exit code 3",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert json.loads(PROTOCOLS[V5].error_payload(failure) or b"") == failure
    assert PROTOCOLS[V4].error_payload(success_status()) == b'{"metadata":{},"status":"Success"}'
    assert PROTOCOLS["channel.k8s.io"].error_payload(success_status()) is None
    assert PROTOCOLS["channel.k8s.io"].error_payload(failure) == failure["message"].encode()
    assert exit_status(0, ["true"]) == success_status()
    assert exit_status(-9, ["sleep"])["details"]["causes"][0]["message"] == "137"
    internal = internal_error_status("boom")
    assert internal["reason"] == "InternalError" and internal["code"] == 500
    assert internal["message"] == "Internal error occurred: boom"


def test_resize_messages() -> None:
    assert parse_resize(b'{"Width":80,"Height":24}') == (80, 24)
    assert parse_resize(b'{"Width":80}') is None
    assert parse_resize(b"not json") is None


def test_stream_options_as_the_kubelet_reads_them() -> None:
    upstream = parse_stream_options(
        MultiDict([("command", "sh"), ("command", "-c"), ("command", "id"), ("input", "1"),
                   ("output", "1"), ("error", "1")]), exec_=True)
    assert upstream.command == ("sh", "-c", "id")
    assert (upstream.stdin, upstream.stdout, upstream.stderr, upstream.tty) == (
        True, True, True, False)
    tty = parse_stream_options(MultiDict([("stdout", "true"), ("stderr", "true"),
                                          ("tty", "1")]), exec_=False)
    assert tty.tty and tty.stdout and not tty.stderr and tty.command == ()
    with pytest.raises(StreamLookupError, match="you must specify at least 1 of stdin, "
                                                "stdout, stderr"):
        parse_stream_options(MultiDict([("command", "ls")]), exec_=True)
    with pytest.raises(StreamLookupError, match="cmd must not be empty"):
        parse_stream_options(MultiDict([("output", "1")]), exec_=True)


# -- sessions through the apiserver -------------------------------------------------------------


class Frames:
    """What a client received: per-channel bytes, and the order of channels."""

    def __init__(self) -> None:
        self.channels: dict[int, bytes] = {}
        self.order: list[int] = []

    def add(self, channel: int, payload: bytes) -> None:
        self.order.append(channel)
        self.channels[channel] = self.channels.get(channel, b"") + payload

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.channels[3])
        return result


async def session(h: Harness, subresource: str, query: list[tuple[str, str]],
                  protocols: tuple[str, ...] = (V5, V4), stdin: list[bytes] | None = None,
                  name: str = "box") -> tuple[str | None, Frames]:
    """Open pods/NAME/<subresource>, send `stdin` frames (already channel-prefixed), read
    until the server closes."""
    url = f"{h.api.server}/api/v1/namespaces/default/pods/{name}/{subresource}"
    frames = Frames()
    async with aiohttp.ClientSession() as client, client.ws_connect(
            url, params=query, protocols=protocols) as ws:
        protocol = PROTOCOLS[ws.protocol or "channel.k8s.io"]
        for frame in stdin or []:
            await ws.send_bytes(frame)
        async for message in ws:
            assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT)
            frames.add(*protocol.decode(message.data))
        assert ws.close_code == aiohttp.WSCloseCode.OK
        return ws.protocol, frames


async def running_box(h: Harness, **spec: Any) -> None:
    await h.create(pod("box", argv=["sleep", "3600"], **spec))
    await h.wait_pod("box", lambda p: (p.get("status") or {}).get("phase") == "Running")


async def test_exec_output_and_exit_codes_through_the_apiserver(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_box(h)
        protocol, frames = await session(h, "exec", [
            ("command", "echo"), ("command", "hello"), ("command", "world"),
            ("stdout", "true"), ("stderr", "true")])
        assert protocol == V5
        assert frames.order[0] == 1 and frames.channels[1] == b"hello world\n"
        assert frames.status() == {"metadata": {}, "status": "Success"}
        assert frames.order[-1] == 3  # the outcome comes after all the output
        protocol, frames = await session(h, "exec", [
            ("command", "exit"), ("command", "3"), ("stdout", "true")], protocols=(V4,))
        assert protocol == V4
        status = frames.status()
        assert status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
        calls = [c for c in h.runtime.calls if c[0] == "exec"]
        assert [c[2:] for c in calls] == [("echo", "hello", "world"), ("exit", "3")]


async def test_stdin_is_closed_by_the_v5_close_signal(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_box(h)
        protocol, frames = await session(
            h, "exec", [("command", "cat"), ("stdin", "true"), ("stdout", "true")],
            stdin=[b"\x00line one\n", b"\x00line two\n", b"\xff\x00"])
        assert protocol == V5
        assert frames.channels[1] == b"line one\nline two\n"
        assert frames.status()["status"] == "Success"


async def test_base64_protocol_and_attach(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_box(h)
        url = f"{h.api.server}/api/v1/namespaces/default/pods/box/attach"
        async with aiohttp.ClientSession() as client, client.ws_connect(
                url, params={"stdin": "true", "stdout": "true"},
                protocols=("v4.base64.channel.k8s.io",)) as ws:
            assert ws.protocol == "v4.base64.channel.k8s.io"
            first = await ws.receive()
            assert first.type == aiohttp.WSMsgType.TEXT and first.data == "1"
            await ws.send_str("0aGVsbG8K")  # "hello\n"
            echoed = await ws.receive()
            assert echoed.data == "1aGVsbG8K"
            await ws.close()
        assert any(call[0] == "attach" for call in h.runtime.calls)


async def test_refusals_before_the_upgrade(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await running_box(h)
        await h.create(pod("done", argv=["exit", "0"], restartPolicy="Never"))
        await h.wait_pod("done", lambda p: (p.get("status") or {}).get("phase") == "Succeeded")
        base = f"{h.api.server}/api/v1/namespaces/default/pods"
        async with aiohttp.ClientSession() as client:
            # the apiserver's own checks, as Status bodies
            async with client.get(f"{base}/box/exec", params={
                    "command": "ls", "container": "zz", "stdout": "true"}) as resp:
                assert resp.status == 400
                assert (await resp.json())["message"] == "container zz is not valid for pod box"
            async with client.get(f"{base}/nope/exec", params={"command": "ls"}) as resp:
                assert resp.status == 404
                assert (await resp.json())["message"] == 'pods "nope" not found'
            # the kubelet's refusal of a WebSocket upgrade, relayed as it is
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(f"{base}/done/exec", params={
                    "command": "ls", "stdout": "true"}, protocols=(V5,))
            assert refused.value.status == 500
            async with client.post(f"{base}/done/exec", params={
                    "command": "ls", "stdout": "true"}) as resp:
                assert (resp.status, await resp.text()) == (500, 'container not found ("c")')
            async with client.post(f"{base}/box/exec", params={"command": "ls"}) as resp:
                assert (resp.status, await resp.text()) == (
                    400, "you must specify at least 1 of stdin, stdout, stderr")
            # a request that is no WebSocket upgrade (kubectl's SPDY fallback)
            async with client.post(f"{base}/box/exec", params={
                    "command": "ls", "stdout": "true"},
                    headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}) as resp:
                assert resp.status == 400
                assert "WebSocket only" in await resp.text()
            # straight to the kubelet: subprotocols it does not speak
            kubelet = f"http://127.0.0.1:{h.kubelet.bound_port}/exec/default/box/c"
            with pytest.raises(aiohttp.WSServerHandshakeError) as unknown:
                await client.ws_connect(kubelet, params={"command": "ls", "output": "1"},
                                        protocols=("x.example",))
            assert unknown.value.status == 400
