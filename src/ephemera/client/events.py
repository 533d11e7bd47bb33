"""`EventRecorder`: core/v1 Events about objects, as client-go's event recorder writes them.

`await recorder.record(pod, "Warning", "FailedScheduling", message, action="Scheduling")`
creates an Event in the object's namespace (`default` for a cluster-scoped object) named
`<object name>.<hex nanoseconds>`, with `involvedObject` pointing at the object,
`source.component` and `reportingComponent` the component, `reportingInstance`
`<component>-<host>`, and `count: 1`. Before it is written, the event goes through
client-go's correlator (`EventCorrelator`): the same event again bumps `count` and
`lastTimestamp` of the existing Event instead, the tenth distinct message of one kind of
event about an object within 10 minutes is combined with the next ones into one Event, and
each component writes at most 25 events about one object, then one every 5 minutes (the rest
are dropped). Recording is best effort: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.client.api import ApiClient, ApiUnavailable, resource_path
from ephemera.client.eventcorrelator import EventCorrelator

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, api: ApiClient, component: str, host: str | None = None, *,
                 correlator: EventCorrelator | None = None) -> None:
        """`correlator`: shared with other recorders (the hollow nodes' one for all their
        nodes); a new one by default."""
        self.api = api
        self.component = component
        self.host = host or socket.gethostname()
        self.correlator = correlator if correlator is not None else EventCorrelator()

    def _event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str,
               action: str) -> dict[str, Any]:
        md = obj.get("metadata") or {}
        namespace = md.get("namespace") or "default"
        now = _now()
        involved = {"kind": obj.get("kind") or "", "namespace": md.get("namespace") or "",
                    "name": md.get("name") or "", "uid": md.get("uid") or "",
                    "apiVersion": obj.get("apiVersion") or "",
                    "resourceVersion": md.get("resourceVersion") or ""}
        event: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md.get('name') or 'object'}.{time.time_ns():x}",
                         "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": f"{self.component}-{self.host}",
        }
        if action:
            event["action"] = action
        return event

    async def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str,
                     *, action: str = "", kind: str = "", api_version: str = "") -> None:
        """Record `reason`/`message` (`type_` is `Normal` or `Warning`) about `obj`; `kind`
        and `api_version` name its type when `obj` lacks them (list items do)."""
        if kind or api_version:
            obj = {**obj, "kind": obj.get("kind") or kind,
                   "apiVersion": obj.get("apiVersion") or api_version}
        md = obj.get("metadata") or {}
        correlated = self.correlator.correlate(self._event(obj, type_, reason, message, action))
        if correlated is None:
            log.debug("event %s %s about %s/%s dropped by the spam filter", type_, reason,
                      md.get("namespace") or "", md.get("name") or "")
            return
        event = correlated.event
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
        try:
            if correlated.patch is not None:
                try:
                    stored = await self.api.patch(resource_path("events", namespace, name),
                                                  correlated.patch, patch_type="merge")
                    self.correlator.written(correlated, stored)
                    return
                except StatusError as err:
                    if err.code != 404:
                        raise
            stored = await self.api.create(resource_path("events", namespace), event)
            self.correlator.written(correlated, stored)
        except (StatusError, ApiUnavailable) as err:
            log.warning("could not record event %s %s about %s/%s: %s", type_, reason,
                        md.get("namespace") or "", md.get("name") or "", err)
