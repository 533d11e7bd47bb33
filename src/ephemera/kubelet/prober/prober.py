"""Running one probe of a container and reporting it (upstream's `prober.go`): the handler
the probe names, retried up to three times while it cannot be run, then the result as the
kubelet keeps it and the `Unhealthy` / `ProbeWarning` event upstream posts:

- failure: `Warning Unhealthy` `<Kind> probe failed: <output>` (`Liveness`, `Readiness`,
  `Startup`); the result is Failure;
- warning (an HTTP redirect to another host): `Warning ProbeWarning`
  `<Kind> probe warning: <output>`; the result is Success;
- could not run: `Warning Unhealthy` `<Kind> probe errored and resulted in unknown state:
  <error>`; the worker throws the result away (`ProbeErrored`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any

from ephemera.kubelet import containerconfig
from ephemera.kubelet.prober import handlers
from ephemera.kubelet.prober.handlers import Outcome, ProbeError, ProbeTarget
from ephemera.kubelet.prober.results import Result
from ephemera.kubelet.runtime.base import RuntimeService

__all__ = ["PROBE_WARNING", "UNHEALTHY", "ProbeErrored", "ProbeKind", "Prober"]

UNHEALTHY = "Unhealthy"  # events.ContainerUnhealthy
PROBE_WARNING = "ProbeWarning"  # events.ContainerProbeWarning
MAX_PROBE_RETRIES = 3

# (pod, container name, event type, reason, message, init container?)
EventSink = Callable[[Mapping[str, Any], str, str, str, str, bool], Awaitable[None]]


class ProbeKind(StrEnum):
    LIVENESS = "Liveness"
    READINESS = "Readiness"
    STARTUP = "Startup"

    @property
    def field(self) -> str:
        return {"Liveness": "livenessProbe", "Readiness": "readinessProbe",
                "Startup": "startupProbe"}[self.value]


class ProbeErrored(Exception):
    """The probe could not be run; its result is thrown away."""


def _static_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value") or "") for e in container.get("env") or []
            if isinstance(e, dict) and "valueFrom" not in e}


class Prober:
    """Runs probes through the runtime (exec) or the pod's network (httpGet, tcpSocket,
    grpc) and posts their events through `post_event`."""

    def __init__(self, runtime: RuntimeService, post_event: EventSink) -> None:
        self.runtime = runtime
        self.post_event = post_event

    async def _run(self, spec: Mapping[str, Any], container: Mapping[str, Any],
                   container_id: str, target: ProbeTarget) -> tuple[Outcome, str]:
        timeout = float(spec.get("timeoutSeconds") or 1)
        if isinstance(spec.get("exec"), dict):
            env = _static_env(container)
            command = [containerconfig.expand(str(a), env)
                       for a in spec["exec"].get("command") or []]
            return await handlers.exec_probe(self.runtime, container_id, command, timeout)
        if isinstance(spec.get("httpGet"), dict):
            return await handlers.http_probe(target, spec["httpGet"], container, timeout)
        if isinstance(spec.get("tcpSocket"), dict):
            action = spec["tcpSocket"]
            port = handlers.resolve_port(action.get("port"), container)
            return await handlers.tcp_probe(target, str(action.get("host") or ""), port,
                                            timeout)
        if isinstance(spec.get("grpc"), dict):
            action = spec["grpc"]
            return await handlers.grpc_probe(target, int(action.get("port") or 0),
                                             str(action.get("service") or ""), timeout)
        raise ProbeError(f"missing probe handler for {container.get('name')}")

    async def probe(self, kind: ProbeKind, pod: Mapping[str, Any],
                    container: Mapping[str, Any], container_id: str, target: ProbeTarget, *,
                    init: bool = False) -> Result:
        """One probe of the container instance `container_id`; raises ProbeErrored."""
        spec = container.get(kind.field)
        if not isinstance(spec, dict):
            return Result.SUCCESS
        name = str(container.get("name"))
        error: ProbeError | None = None
        outcome, output = Outcome.UNKNOWN, ""
        for _ in range(MAX_PROBE_RETRIES):
            try:
                outcome, output = await self._run(spec, container, container_id, target)
            except ProbeError as err:
                error = err
                continue
            error = None
            break
        if error is not None:
            await self.post_event(pod, name, "Warning", UNHEALTHY,
                                  f"{kind} probe errored and resulted in unknown state: "
                                  f"{error}", init)
            raise ProbeErrored(str(error))
        if outcome == Outcome.SUCCESS:
            return Result.SUCCESS
        if outcome == Outcome.WARNING:
            await self.post_event(pod, name, "Warning", PROBE_WARNING,
                                  f"{kind} probe warning: {output}", init)
            return Result.SUCCESS
        if outcome == Outcome.FAILURE:
            await self.post_event(pod, name, "Warning", UNHEALTHY,
                                  f"{kind} probe failed: {output}", init)
        return Result.FAILURE
