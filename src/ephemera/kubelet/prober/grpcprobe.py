"""The gRPC health probe, run as a helper process: `python -m ephemera.kubelet.prober.grpcprobe
'{"netns": ..., "host": ..., "port": ..., "service": ..., "timeout": ..., "user_agent": ...}'`
joins the network namespace (before grpcio starts any thread), calls
`grpc.health.v1.Health/Check` and prints `{"outcome": ..., "output": ...}` with upstream's
messages (`pkg/probe/grpc`). It imports nothing of ephemera but `netns`, so it starts fast.

The health messages are grpcio-health-checking's (`grpc_health.v1`, the gRPC project's
generated `health.proto`), imported with grpcio after `setns`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ephemera.kubelet.prober.netns import _setns

__all__ = ["check", "main", "status_name"]


def status_name(status: int) -> str:
    """The `ServingStatus` name Go prints for `status` (the number for one it does not know)."""
    from grpc_health.v1 import health_pb2

    try:
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
    except ValueError:
        return str(status)


def _go_duration(seconds: float) -> str:
    return f"{seconds:g}s"


def check(host: str, port: int, service: str, timeout: float,
          user_agent: str) -> tuple[str, str]:
    import grpc  # after setns: grpcio's threads start in the pod's namespace
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    quoted = json.dumps(address)
    channel = grpc.insecure_channel(address, options=[("grpc.primary_user_agent", user_agent)])
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return "failure", (f"timeout: failed to connect service {quoted} within "
                               f"{_go_duration(timeout)}: context deadline exceeded")
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
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
        status = int(answer.status)
        if status != health_pb2.HealthCheckResponse.SERVING:
            return "failure", (f"service unhealthy (responded with "
                               f"{json.dumps(status_name(status))})")
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
