"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `tools/leaderelection`
does it; the scheduler and the controller-manager run their work only while they lead.

- `LeaderElectionConfig`: the Lease (`namespace`/`name`), this candidate's `identity`
  (`new_identity()`: `HOSTNAME_UUID`, as upstream's components make it) and the timings:
  `lease_duration` (15 s), `renew_deadline` (10 s), `retry_period` (2 s), checked with
  client-go's rules and messages (`LeaderElectionConfig.validate`).
- `LeaseLock`: get, create and update the Lease; an update sends the resourceVersion last
  read or written, so two candidates racing for one Lease cannot both win (the loser gets
  409). `record_event` posts upstream's `LeaderElection` events about the Lease
  (`"<identity> became leader"`, `"<identity> stopped leading"`).
- `LeaderElector.run(lead, stop)`: tries to acquire the Lease every `retry_period` (with
  client-go's jitter factor 1.2) until it is free or expired; then runs `lead()` while it
  renews every `retry_period`; a renewal that cannot succeed within `renew_deadline` ends the
  leadership: `lead()` is cancelled and `run` returns False (upstream's components then exit:
  `OnStoppedLeading`). When `stop` is set, `run` returns True, first releasing the Lease when
  `release_on_cancel` (an empty holder and a 1 s duration, so another candidate takes over
  at once).

Expiry is judged as client-go judges it: by this process's monotonic clock, from the moment it
last saw the Lease change, never by comparing the Lease's `renewTime` with the local clock, so
clock skew between machines cannot shorten a lease. A candidate therefore takes over a dead
leader's Lease between `lease_duration` and `lease_duration` plus about two retry periods
after the leader's last renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.client.api import ApiClient, ApiUnavailable, resource_path
from ephemera.client.events import EventRecorder

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_RENEW_DEADLINE",
    "DEFAULT_RESOURCE_NAMESPACE",
    "DEFAULT_RETRY_PERIOD",
    "JITTER_FACTOR",
    "LeaderElectionConfig",
    "LeaderElectionError",
    "LeaderElectionRecord",
    "LeaderElector",
    "LeaseLock",
    "new_identity",
]

log = logging.getLogger(__name__)

# Upstream's defaults (component-base's `RecommendedDefaultLeaderElectionConfiguration`).
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
DEFAULT_RESOURCE_NAMESPACE = "kube-system"
# client-go's `JitterFactor`: a candidate waits retry_period * (1 + rand * 1.2) between tries.
JITTER_FACTOR = 1.2
LEASE_GROUP = "coordination.k8s.io"
LEASE_API_VERSION = "coordination.k8s.io/v1"


class LeaderElectionError(ValueError):
    """A leader election configuration client-go would refuse."""


def new_identity() -> str:
    """`HOSTNAME_UUID`: upstream's identity of a scheduler or controller-manager candidate
    (the uniquifier keeps two processes on one host apart)."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _micro_time() -> str:
    """A `MicroTime` as upstream writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD
    release_on_cancel: bool = False

    def validate(self) -> None:
        """client-go's `NewLeaderElector` checks, in its order and words."""
        if self.lease_duration <= self.renew_deadline:
            raise LeaderElectionError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise LeaderElectionError("renewDeadline must be greater than "
                                      "retryPeriod*JitterFactor")
        if self.lease_duration <= 0:
            raise LeaderElectionError("leaseDuration must be greater than zero")
        if self.renew_deadline <= 0:
            raise LeaderElectionError("renewDeadline must be greater than zero")
        if self.retry_period <= 0:
            raise LeaderElectionError("retryPeriod must be greater than zero")
        if not self.name:
            raise LeaderElectionError("resourceName is required")
        if not self.identity:
            raise LeaderElectionError("Lock identity is empty")

    @property
    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class LeaderElectionRecord:
    """A Lease's `spec` as the elector reads and writes it."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    leader_transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Any) -> LeaderElectionRecord:
        spec = spec if isinstance(spec, dict) else {}

        def integer(key: str) -> int:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        return cls(holder_identity=str(spec.get("holderIdentity") or ""),
                   lease_duration_seconds=integer("leaseDurationSeconds"),
                   acquire_time=spec.get("acquireTime") or None,
                   renew_time=spec.get("renewTime") or None,
                   leader_transitions=integer("leaseTransitions"))

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"holderIdentity": self.holder_identity,
                                "leaseDurationSeconds": self.lease_duration_seconds,
                                "leaseTransitions": self.leader_transitions}
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class LeaseLock:
    """The Lease `namespace/name`, read and written by one candidate."""

    def __init__(self, api: ApiClient, namespace: str, name: str, identity: str,
                 recorder: EventRecorder | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.recorder = recorder
        self.lease: dict[str, Any] | None = None

    def _path(self) -> str:
        return resource_path("leases", self.namespace, self.name, group=LEASE_GROUP)

    async def get(self) -> tuple[LeaderElectionRecord, bytes]:
        """The record and its raw form (to tell a change); a missing Lease raises 404."""
        self.lease = await self.api.get(self._path())
        spec = self.lease.get("spec") or {}
        return LeaderElectionRecord.from_spec(spec), orjson.dumps(spec,
                                                                  option=orjson.OPT_SORT_KEYS)

    async def create(self, record: LeaderElectionRecord) -> None:
        body = {"apiVersion": LEASE_API_VERSION, "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.to_spec()}
        self.lease = await self.api.create(
            resource_path("leases", self.namespace, group=LEASE_GROUP), body)

    async def update(self, record: LeaderElectionRecord) -> None:
        """PUT the record on the Lease last read or written: its resourceVersion makes the
        write fail with 409 when someone else wrote in between."""
        if self.lease is None:
            raise RuntimeError("lease not initialized, call get or create first")
        body = {**self.lease, "spec": record.to_spec()}
        self.lease = await self.api.update(self._path(), body)

    async def record_event(self, what: str) -> None:
        """Upstream's `LeaderElection` event about the Lease: `"<identity> <what>"`."""
        if self.recorder is None or self.lease is None:
            return
        subject = {**self.lease, "kind": "Lease", "apiVersion": LEASE_API_VERSION}
        await self.recorder.record(subject, "Normal", "LeaderElection",
                                   f"{self.identity} {what}")


class LeaderElector:
    """One candidate for one Lease (see the module's docstring)."""

    def __init__(self, config: LeaderElectionConfig, lock: LeaseLock, *,
                 clock: Callable[[], float] = time.monotonic,
                 on_new_leader: Callable[[str], None] | None = None) -> None:
        config.validate()
        self.config = config
        self.lock = lock
        self.clock = clock
        self.on_new_leader = on_new_leader
        self.observed = LeaderElectionRecord()
        self._observed_raw: bytes | None = None
        self._recording: asyncio.Task[None] | None = None
        self._observed_time = 0.0
        self._reported_leader = ""

    # -- what this candidate knows ---------------------------------------------------------

    def is_leader(self) -> bool:
        return self.observed.holder_identity == self.config.identity

    def leader(self) -> str:
        """The holder this candidate last saw ("" when none yet)."""
        return self.observed.holder_identity

    def _observe(self, record: LeaderElectionRecord) -> None:
        self.observed = record
        self._observed_time = self.clock()

    def _lease_valid(self, now: float) -> bool:
        return self._observed_time + self.observed.lease_duration_seconds > now

    def _report_transition(self) -> None:
        holder = self.observed.holder_identity
        if holder == self._reported_leader:
            return
        self._reported_leader = holder
        if holder:
            log.info("new leader of %s: %s", self.config.describe, holder)
        if self.on_new_leader is not None:
            self.on_new_leader(holder)

    # -- one try ---------------------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """client-go's `tryAcquireOrRenew`: True when this candidate holds the Lease now."""
        now = self.clock()
        stamp = _micro_time()
        record = LeaderElectionRecord(
            holder_identity=self.config.identity,
            lease_duration_seconds=max(1, int(self.config.lease_duration)),
            acquire_time=stamp, renew_time=stamp)
        # 1. The leader's fast path: update the Lease last written, assuming it is current.
        if self.is_leader() and self._lease_valid(now):
            mine = LeaderElectionRecord(
                holder_identity=record.holder_identity,
                lease_duration_seconds=record.lease_duration_seconds,
                acquire_time=self.observed.acquire_time, renew_time=stamp,
                leader_transitions=self.observed.leader_transitions)
            try:
                await self.lock.update(mine)
            except (StatusError, ApiUnavailable) as err:
                log.debug("failed to update lease %s optimistically, falling back to the "
                          "slow path: %s", self.config.describe, err)
            else:
                self._observe(mine)
                return True
        # 2. Read the Lease, or create it.
        try:
            old, raw = await self.lock.get()
        except StatusError as err:
            if err.code != 404:
                log.error("error retrieving resource lock %s: %s", self.config.describe,
                          err.message)
                return False
            try:
                await self.lock.create(record)
            except (StatusError, ApiUnavailable) as create_err:
                log.error("error initially creating leader election record: %s", create_err)
                return False
            self._observe(record)
            return True
        except ApiUnavailable as err:
            log.error("error retrieving resource lock %s: %s", self.config.describe, err)
            return False
        # 3. A change seen now restarts the expiry clock.
        if raw != self._observed_raw:
            self._observe(old)
            self._observed_raw = raw
        if old.holder_identity and self._lease_valid(now) and not self.is_leader():
            log.debug("lock is held by %s and has not yet expired", old.holder_identity)
            return False
        # 4. Take it over (a new term) or renew it (the same term).
        if self.is_leader():
            record = LeaderElectionRecord(
                holder_identity=record.holder_identity,
                lease_duration_seconds=record.lease_duration_seconds,
                acquire_time=old.acquire_time, renew_time=stamp,
                leader_transitions=old.leader_transitions)
        else:
            record = LeaderElectionRecord(
                holder_identity=record.holder_identity,
                lease_duration_seconds=record.lease_duration_seconds,
                acquire_time=stamp, renew_time=stamp,
                leader_transitions=old.leader_transitions + 1)
        try:
            await self.lock.update(record)
        except (StatusError, ApiUnavailable) as err:
            log.error("Failed to update lock: %s", err)
            return False
        self._observe(record)
        return True

    async def _try(self, timeout: float) -> bool:
        """One try, bounded (upstream bounds the lock's client by the renew deadline). A try
        that timed out marks the apiserver it went to as not answering, so that with several
        (`--apiserver-endpoints`) the next try goes to another one."""
        server = self.lock.api.server
        try:
            async with asyncio.timeout(timeout):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.error("leader election request for %s to %s timed out", self.config.describe,
                      server)
            self.lock.api.endpoints.failed(server, f"no answer within {timeout:g}s")
            return False

    # -- the loops -------------------------------------------------------------------------

    def _jittered(self) -> float:
        return self.config.retry_period * (1 + random.random() * JITTER_FACTOR)

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease (tries every jittered retry period)."""
        log.info("candidate %s for lease %s", self.config.identity, self.config.describe)
        log.info("attempting to acquire leader lease %s...", self.config.describe)
        while True:
            succeeded = await self._try(self.config.renew_deadline)
            self._report_transition()
            if succeeded:
                # as client-go's recorder, the event does not hold up the leader: renewing
                # starts while it is posted (an apiserver that stalls it would otherwise stall
                # the first renewal past the renew deadline)
                self._recording = asyncio.create_task(self.lock.record_event("became leader"),
                                                      name="leader-election-event")
                log.info("successfully acquired lease %s", self.config.describe)
                return
            await asyncio.sleep(self._jittered())

    async def renew(self) -> None:
        """Renew every retry period; return when a renewal could not succeed within the
        renew deadline."""
        while True:
            deadline = self.clock() + self.config.renew_deadline
            while True:
                remaining = deadline - self.clock()
                # With several apiservers a try gets half the deadline, so that one that
                # stalls (a request on a kept-alive connection never dials, so no connect
                # timeout fails it over) leaves time to renew through another.
                bound = remaining if len(self.lock.api.endpoints.urls) < 2 else \
                    min(remaining, self.config.renew_deadline / 2)
                if remaining > 0 and await self._try(bound):
                    break
                self._report_transition()
                if self.clock() + self.config.retry_period >= deadline:
                    log.info("failed to renew lease %s: timed out waiting for the condition",
                             self.config.describe)
                    return
                await asyncio.sleep(self.config.retry_period)
            self._report_transition()
            await asyncio.sleep(self.config.retry_period)

    async def release(self) -> bool:
        """Give the Lease up (an empty holder, 1 s) if this candidate holds it; retried on
        a conflict, bounded by the renew deadline."""
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                while True:
                    try:
                        old, _ = await self.lock.get()
                    except (StatusError, ApiUnavailable) as err:
                        log.error("error retrieving resource lock %s: %s",
                                  self.config.describe, err)
                        return False
                    if not self.is_leader():
                        return True
                    stamp = _micro_time()
                    record = LeaderElectionRecord(
                        lease_duration_seconds=1, acquire_time=stamp, renew_time=stamp,
                        leader_transitions=old.leader_transitions)
                    try:
                        await self.lock.update(record)
                    except StatusError as err:
                        if err.code == 409:
                            continue
                        log.error("Failed to release lock: %s", err.message)
                        return False
                    except ApiUnavailable as err:
                        log.error("Failed to release lock: %s", err)
                        return False
                    self._observe(record)
                    log.info("released lease %s", self.config.describe)
                    return True
        except TimeoutError:
            log.error("Failed to release lock %s: timed out", self.config.describe)
            return False

    async def run(self, lead: Callable[[], Awaitable[Any]], stop: asyncio.Event) -> bool:
        """Acquire, then run `lead()` while renewing. True when `stop` ended it; False when
        the leadership was lost (or `lead()` ended by itself, its error logged)."""
        stopper = asyncio.create_task(stop.wait(), name="leader-election-stop")
        acquiring = asyncio.create_task(self.acquire(), name="leader-election-acquire")
        try:
            await asyncio.wait({stopper, acquiring}, return_when=asyncio.FIRST_COMPLETED)
            if not acquiring.done():
                return True
            acquiring.result()
            work = asyncio.ensure_future(lead())
            renewing = asyncio.create_task(self.renew(), name="leader-election-renew")
            try:
                await asyncio.wait({stopper, work, renewing},
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                work.cancel()
                renewing.cancel()
                ended = await asyncio.gather(work, renewing, return_exceptions=True)
            failure = ended[0]
            if isinstance(failure, Exception):
                log.error("the work led under %s failed: %s", self.config.describe, failure)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.renew_deadline):
                    if self._recording is not None:
                        await self._recording  # "became leader" goes first
                    await self.lock.record_event("stopped leading")
            if self.config.release_on_cancel:
                await self.release()
            return stop.is_set()
        finally:
            pending = [stopper, acquiring]
            if self._recording is not None:
                pending.append(self._recording)
            await cancel_and_wait(*pending)
