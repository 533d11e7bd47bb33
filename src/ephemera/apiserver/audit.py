"""Audit: who did what to which object, and when, as `audit.k8s.io/v1` Events in JSON lines.

Upstream's model (`k8s.io/apiserver/pkg/audit`): a `Policy` of ordered rules gives each
request a level (`None`, `Metadata`, `Request`, `RequestResponse`) and the stages to leave
out; the first rule that matches decides, and no match means `None`. An event carries the
user, verb, request URI, object reference, response status and timestamps; `Request` adds
the request body as `requestObject`, `RequestResponse` also the response as
`responseObject`. `AuditLog` writes one event per line and rotates the file by size, keeping
`max_backups` old files named as upstream's log backend names them
(`audit-2026-11-29T16-40-00.000.log`).

Stages written: `RequestReceived` (unless omitted) and `ResponseComplete`; a watch's events
are written when it ends (upstream also writes `ResponseStarted` for long-running requests;
ephemera does not). The default policy (`data/audit-policy.yaml`) records every
`pods/dynamic` request at `RequestResponse` and keeps Secrets, ConfigMaps and tokens at
`Metadata`, so no Secret data reaches the log.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from ephemera.api.errors import StatusError
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authnreviews import user_info_json
from ephemera.apiserver.authz import Attributes
from ephemera.apiserver.authz.requestinfo import attributes_of
from ephemera.apiserver.body import RAW_BODY, DecodeError, decode_document

LEVELS = ("None", "Metadata", "Request", "RequestResponse")
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")


class PolicyError(ValueError):
    """An audit policy file that is not a valid `audit.k8s.io/v1` Policy."""


@dataclass(frozen=True)
class GroupResources:
    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def matches(self, attributes: Attributes) -> bool:
        if self.group != attributes.api_group:
            return False
        if self.resource_names and attributes.name not in self.resource_names:
            return False
        if not self.resources:
            return True
        resource, sub = attributes.resource, attributes.subresource
        combined = f"{resource}/{sub}" if sub else resource
        for pattern in self.resources:
            if pattern in ("*", combined):
                return True
            if pattern == f"*/{sub}" and sub:
                return True
            if pattern == f"{resource}/*":
                return True
        return False


@dataclass(frozen=True)
class PolicyRule:
    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: tuple[str, ...] = ()
    omit_managed_fields: bool | None = None

    def matches(self, attributes: Attributes) -> bool:
        user = attributes.user
        if self.users and user.name not in self.users:
            return False
        if self.user_groups and not set(self.user_groups) & set(user.groups):
            return False
        if self.verbs and attributes.verb not in self.verbs:
            return False
        if attributes.resource_request:
            if self.non_resource_urls:
                return False
            if self.namespaces and attributes.namespace not in self.namespaces:
                return False
            return not self.resources or any(r.matches(attributes) for r in self.resources)
        if self.resources or self.namespaces:
            return False
        return not self.non_resource_urls or any(
            _url_matches(pattern, attributes.path) for pattern in self.non_resource_urls)


def _url_matches(pattern: str, path: str) -> bool:
    if pattern == "*" or pattern == path:
        return True
    return pattern.endswith("*") and path.startswith(pattern[:-1])


@dataclass(frozen=True)
class Decision:
    """What the policy says of one request."""

    level: str
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False

    def records(self, stage: str) -> bool:
        return self.level != "None" and stage not in self.omit_stages


@dataclass(frozen=True)
class Policy:
    rules: tuple[PolicyRule, ...]
    omit_stages: tuple[str, ...] = ()
    omit_managed_fields: bool = False

    def decide(self, attributes: Attributes) -> Decision:
        for rule in self.rules:
            if rule.matches(attributes):
                omit_managed = (self.omit_managed_fields if rule.omit_managed_fields is None
                                else rule.omit_managed_fields)
                return Decision(rule.level, frozenset(self.omit_stages + rule.omit_stages),
                                omit_managed)
        return Decision("None")


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{path}: must be a list of strings")
    return tuple(value)


def _stages(value: Any, path: str) -> tuple[str, ...]:
    stages = _strings(value, path)
    for stage in stages:
        if stage not in STAGES:
            raise PolicyError(f'{path}: Unsupported value: "{stage}": supported values: '
                              + ", ".join(f'"{s}"' for s in STAGES))
    return stages


def parse_policy(document: Any) -> Policy:
    """A Policy from its decoded YAML/JSON; PolicyError names the bad field."""
    if not isinstance(document, dict):
        raise PolicyError("the policy must be an object")
    if document.get("kind") != "Policy" or document.get("apiVersion") != "audit.k8s.io/v1":
        raise PolicyError('the policy must have apiVersion "audit.k8s.io/v1" and kind "Policy"')
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise PolicyError("rules: Required value: the policy must have at least one rule")
    rules = []
    for index, raw in enumerate(raw_rules):
        path = f"rules[{index}]"
        if not isinstance(raw, dict):
            raise PolicyError(f"{path}: must be an object")
        level = raw.get("level")
        if level not in LEVELS:
            raise PolicyError(f'{path}.level: Unsupported value: "{level}": supported values: '
                              + ", ".join(f'"{v}"' for v in LEVELS))
        group_resources = []
        for gi, gr in enumerate(raw.get("resources") or []):
            if not isinstance(gr, dict):
                raise PolicyError(f"{path}.resources[{gi}]: must be an object")
            group_resources.append(GroupResources(
                group=str(gr.get("group", "")),
                resources=_strings(gr.get("resources"), f"{path}.resources[{gi}].resources"),
                resource_names=_strings(gr.get("resourceNames"),
                                        f"{path}.resources[{gi}].resourceNames")))
        urls = _strings(raw.get("nonResourceURLs"), f"{path}.nonResourceURLs")
        if urls and (group_resources or raw.get("namespaces")):
            raise PolicyError(f"{path}.nonResourceURLs: Invalid value: rules cannot apply to "
                              "both regular resources and non-resource URLs")
        omit_managed = raw.get("omitManagedFields")
        rules.append(PolicyRule(
            level=level, users=_strings(raw.get("users"), f"{path}.users"),
            user_groups=_strings(raw.get("userGroups"), f"{path}.userGroups"),
            verbs=_strings(raw.get("verbs"), f"{path}.verbs"),
            resources=tuple(group_resources),
            namespaces=_strings(raw.get("namespaces"), f"{path}.namespaces"),
            non_resource_urls=urls,
            omit_stages=_stages(raw.get("omitStages"), f"{path}.omitStages"),
            omit_managed_fields=bool(omit_managed) if omit_managed is not None else None))
    return Policy(tuple(rules), _stages(document.get("omitStages"), "omitStages"),
                  bool(document.get("omitManagedFields", False)))


def load_policy(path: Path | None = None) -> Policy:
    """The policy in `path`, or ephemera's default policy."""
    if path is None:
        text = resources.files("ephemera.apiserver").joinpath(
            "data/audit-policy.yaml").read_text()
    else:
        text = path.read_text()
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PolicyError(f"not YAML: {err}") from None
    return parse_policy(document)


def timestamp(at: float) -> str:
    """Upstream's MicroTime format: `2026-11-29T16:40:00.123456Z`."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _without_managed_fields(obj: Any) -> Any:
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) \
            and "managedFields" in obj["metadata"]:
        obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items()
                                   if k != "managedFields"}}
    return obj


@dataclass
class AuditRecord:
    """One request being audited: what the policy decided and what is known so far."""

    attributes: Attributes
    decision: Decision
    request_uri: str
    source_ips: tuple[str, ...] = ()
    user_agent: str = ""
    audit_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    received: float = field(default_factory=time.time)
    object_uid: str = ""
    object_resource_version: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    impersonated_user: UserInfo | None = None  # the user it was served as (`impersonation`)

    def event(self, stage: str, *, code: int | None = None, status: Mapping[str, Any] | None
              = None, request_object: Any = None, response_object: Any = None
              ) -> dict[str, Any]:
        attrs = self.attributes
        event: dict[str, Any] = {
            "kind": "Event", "apiVersion": "audit.k8s.io/v1",
            "level": self.decision.level, "auditID": self.audit_id, "stage": stage,
            "requestURI": self.request_uri, "verb": attrs.verb, "user": user_info_json(attrs.user),
        }
        if self.impersonated_user is not None:
            event["impersonatedUser"] = user_info_json(self.impersonated_user)
        event["sourceIPs"] = list(self.source_ips)
        if self.user_agent:
            event["userAgent"] = self.user_agent
        if attrs.resource_request:
            ref: dict[str, Any] = {"resource": attrs.resource}
            for key, value in (("namespace", attrs.namespace), ("name", attrs.name),
                               ("uid", self.object_uid), ("apiGroup", attrs.api_group),
                               ("apiVersion", attrs.api_version),
                               ("resourceVersion", self.object_resource_version),
                               ("subresource", attrs.subresource)):
                if value:
                    ref[key] = value
            event["objectRef"] = ref
        if code is not None:
            response_status: dict[str, Any] = {"metadata": {}, "code": code}
            if status is not None and code >= 300:
                for key in ("status", "message", "reason", "details"):
                    if key in status:
                        response_status[key] = status[key]
            event["responseStatus"] = response_status
        level = LEVELS.index(self.decision.level)
        if level >= LEVELS.index("Request") and request_object is not None:
            event["requestObject"] = (_without_managed_fields(request_object)
                                      if self.decision.omit_managed_fields else request_object)
        if level >= LEVELS.index("RequestResponse") and response_object is not None:
            event["responseObject"] = (_without_managed_fields(response_object)
                                       if self.decision.omit_managed_fields
                                       else response_object)
        event["requestReceivedTimestamp"] = timestamp(self.received)
        event["stageTimestamp"] = timestamp(time.time())
        if self.annotations:
            event["annotations"] = dict(self.annotations)
        return event


class AuditLog:
    """Appends events as JSON lines to `path`; past `max_size_bytes` the file is renamed to
    `<stem>-<time>.log` and a new one started, keeping the newest `max_backups` old files
    (0 keeps all). Writes are whole lines under a lock, flushed per event.

    `shared`: several processes (the workers of `ephemera apiserver --workers`) append to one
    file. Then the lock is also an `flock` of `<path>.lock` across the processes, each line
    is one `O_APPEND` write, and before writing a process reopens `path` when another one
    has rotated it (its open file is no longer the one at `path`)."""

    def __init__(self, path: Path, *, max_size_bytes: int = 100 * 1024 * 1024,
                 max_backups: int = 10, shared: bool = False) -> None:
        self.path = path
        self.max_size_bytes = max_size_bytes
        self.max_backups = max_backups
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab")  # noqa: SIM115 - kept open for the log's lifetime
        os.chmod(path, 0o600)
        self._lock_fd: int | None = None
        if shared:
            self._lock_fd = os.open(path.with_name(path.name + ".lock"),
                                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, event: Mapping[str, Any]) -> None:
        line = orjson.dumps(event) + b"\n"
        with self._lock:
            if self._lock_fd is not None:
                self._write_shared(line)
                return
            if self.max_size_bytes and self._file.tell() + len(line) > self.max_size_bytes \
                    and self._file.tell() > 0:
                self._rotate()
            self._file.write(line)
            self._file.flush()

    def _write_shared(self, line: bytes) -> None:
        assert self._lock_fd is not None
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(self._file.fileno())
            if current is None or (current.st_dev, current.st_ino) != (mine.st_dev,
                                                                         mine.st_ino):
                self._file.close()  # rotated by another process
                self._file = open(self.path, "ab")  # noqa: SIM115
                os.chmod(self.path, 0o600)
                mine = os.fstat(self._file.fileno())
            if self.max_size_bytes and mine.st_size + len(line) > self.max_size_bytes \
                    and mine.st_size > 0:
                self._rotate()
            os.write(self._file.fileno(), line)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _rotate(self) -> None:
        self._file.close()
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H-%M-%S.%f")[:-3]
        same_time = [self._order(p)[1] for p in
                     self.path.parent.glob(f"{self.path.stem}-{stamp}*{self.path.suffix}")]
        # Two rotations in one millisecond: number the later ones after every earlier one.
        serial = f"-{max(same_time) + 1}" if same_time else ""
        backup = self.path.with_name(f"{self.path.stem}-{stamp}{serial}{self.path.suffix}")
        os.replace(self.path, backup)
        self._file = open(self.path, "ab")  # noqa: SIM115
        os.chmod(self.path, 0o600)
        if self.max_backups:
            for old in self.backups()[:-self.max_backups]:
                old.unlink(missing_ok=True)

    def backups(self) -> list[Path]:
        """The rotated files, oldest first."""
        pattern = f"{self.path.stem}-*{self.path.suffix}"
        return sorted(self.path.parent.glob(pattern), key=self._order)

    def _order(self, backup: Path) -> tuple[str, int]:
        """A backup's place in time: `<stem>-<time>.<ms>[-<serial>].log`."""
        seconds, _, millis_serial = backup.stem[len(self.path.stem) + 1:].partition(".")
        millis, _, serial = millis_serial.partition("-")
        return f"{seconds}.{millis}", int(serial or 0)

    def close(self) -> None:
        with self._lock:
            self._file.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


def read_events(path: Path) -> Iterable[dict[str, Any]]:
    """The events of one audit log file, in order (for tests and tools)."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield orjson.loads(line)


# --- the request filter --------------------------------------------------------------------

RECORD: web.RequestKey[AuditRecord] = web.RequestKey("audit-record", AuditRecord)
DECISION_ANNOTATION = "authorization.k8s.io/decision"
REASON_ANNOTATION = "authorization.k8s.io/reason"


def annotate_authorization(request: web.Request, allowed: bool, reason: str) -> None:
    """Record the authorizers' verdict on the request's audit event, as upstream does."""
    record = request.get(RECORD)
    if record is not None:
        record.annotations[DECISION_ANNOTATION] = "allow" if allowed else "forbid"
        record.annotations[REASON_ANNOTATION] = reason


def _decoded(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return decode_document(data)
    except DecodeError:
        return None


def _response_object(response: web.StreamResponse) -> Any:
    if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return None
    if not (response.content_type or "").endswith("json"):
        return None
    try:
        return orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return None


class AuditFilter:
    """An aiohttp middleware, placed after authentication and before authorization as
    upstream's `WithAudit`: it decides the request's level from its attributes, writes
    `RequestReceived` at once, and `ResponseComplete` with the status (and, by level, the
    request and response objects) when the handler is done or failed."""

    def __init__(self, policy: Policy, log: AuditLog) -> None:
        self.policy = policy
        self.log = log

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        attributes = attributes_of(request)
        decision = self.policy.decide(attributes)
        if decision.level == "None":
            response: web.StreamResponse = await handler(request)
            return response
        forwarded = request.headers.get("X-Forwarded-For", "")
        sources = [s.strip() for s in forwarded.split(",") if s.strip()]
        if request.remote:
            sources.append(request.remote)
        record = AuditRecord(attributes, decision, request.path_qs, source_ips=tuple(sources),
                             user_agent=request.headers.get("User-Agent", ""))
        request[RECORD] = record
        if decision.records("RequestReceived"):
            self.log.write(record.event("RequestReceived"))
        try:
            response = await handler(request)
        except StatusError as err:
            self._complete(request, record, err.code, err.status(), None)
            raise
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:
            if decision.records("Panic"):
                self.log.write(record.event("Panic", code=500))
            raise
        self._complete(request, record, response.status, None, response)
        return response

    def _complete(self, request: web.Request, record: AuditRecord, code: int,
                  status: Mapping[str, Any] | None, response: web.StreamResponse | None
                  ) -> None:
        if not record.decision.records("ResponseComplete"):
            return
        level = LEVELS.index(record.decision.level)
        request_object = (_decoded(request.get(RAW_BODY))
                          if level >= LEVELS.index("Request") else None)
        response_object = None
        if response is not None and level >= LEVELS.index("RequestResponse"):
            response_object = _response_object(response)
        if status is None and code >= 300 and response is not None:
            answer = _response_object(response)
            status = answer if isinstance(answer, Mapping) else None
        self.log.write(record.event("ResponseComplete", code=code, status=status,
                                    request_object=request_object,
                                    response_object=response_object))
