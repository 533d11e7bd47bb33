"""The gRPC health probe, run as a helper process: `python -m ephemera.kubelet.prober.grpcprobe
'{"netns": ..., "host": ..., "port": ..., "service": ..., "timeout": ..., "user_agent": ...}'`
joins the network namespace (before grpcio starts any thread), calls
`grpc.health.v1.Health/Check` and prints `{"outcome": ..., "output": ...}` with upstream's
messages (`pkg/probe/grpc`). It imports nothing of ephemera but `netns`, so it starts fast.

The two health messages are encoded by hand (one string field in the request, one enum field
in the answer) so that no generated protobuf module is needed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ephemera.kubelet.prober.netns import _setns

__all__ = ["check", "main"]

# grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_request(service: str) -> bytes:
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_status(message: bytes) -> int:
    """The `status` (field 1, varint) of a HealthCheckResponse; 0 when absent."""
    i = 0
    status = 0
    while i < len(message):
        key = message[i]
        i += 1
        if key & 0x07 == 0:  # varint
            value = shift = 0
            while True:
                byte = message[i]
                i += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            if key >> 3 == 1:
                status = value
        elif key & 0x07 == 2:  # length-delimited: skip
            length = shift = 0
            while True:
                byte = message[i]
                i += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            i += length
        else:
            break
    return status


def _go_duration(seconds: float) -> str:
    return f"{seconds:g}s"


def check(host: str, port: int, service: str, timeout: float,
          user_agent: str) -> tuple[str, str]:
    import grpc  # after setns: grpcio's threads start in the pod's namespace

    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    quoted = json.dumps(address)
    channel = grpc.insecure_channel(address, options=[("grpc.primary_user_agent", user_agent)])
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return "failure", (f"timeout: failed to connect service {quoted} within "
                               f"{_go_duration(timeout)}: context deadline exceeded")
        call = channel.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            answer: bytes = call(encode_request(service), timeout=timeout)
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            details = err.details() if hasattr(err, "details") else str(err)
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return "failure", ("this server does not implement the grpc health protocol "
                                   f"(grpc.health.v1.Health): {details}")
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "failure", (f"timeout: health rpc did not complete within "
                                   f"{_go_duration(timeout)}")
            name = code.name if code is not None else "Unknown"
            go_code = "".join(part.capitalize() for part in name.split("_"))
            return "failure", (f"error: health rpc probe failed: rpc error: code = {go_code} "
                               f"desc = {details}")
        status = decode_status(answer)
        if status != 1:
            return "failure", (f"service unhealthy (responded with "
                               f"{json.dumps(SERVING_STATUS.get(status, str(status)))})")
        return "success", "service healthy"
    finally:
        channel.close()


def main(argv: list[str]) -> int:
    request: dict[str, Any] = json.loads(argv[0])
    if request.get("netns"):
        _setns(str(request["netns"]))
    outcome, output = check(str(request["host"]), int(request["port"]),
                            str(request.get("service") or ""), float(request["timeout"]),
                            str(request.get("user_agent") or ""))
    print(json.dumps({"outcome": outcome, "output": output}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
