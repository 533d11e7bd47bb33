"""Node-pressure signals and thresholds (reference k8s-semantics.md 4.4; upstream
`pkg/kubelet/eviction/helpers.go`, `api/types.go`).

- `parse_eviction_hard("nodefs.available<10%,nodefs.inodesFree<5%")` parses the
  `--eviction-hard` flag (comma-separated `signal<value`; the value a percentage of capacity
  or an absolute quantity). Errors are upstream's: `unsupported eviction signal X`,
  `eviction percentage threshold X must be <= 100%: V`, `eviction threshold X must be
  positive: V`, quantity parse errors, and the flag's own `malformed pair, expect
  string<string`. `0%` and `100%` disable a signal. No flag: `DEFAULT_EVICTION_HARD`.
  `containerfs.*`
  thresholds are dropped by `without_container_fs` with upstream's warning (`found
  containerfs.available for hard eviction. ignoring`): upstream replaces them with the nodefs
  ones, and ephemera's container filesystem is the node filesystem.
  Every hard `memory.available` threshold is copied to `allocatableMemory.available`
  (upstream's `addAllocatableThresholds`, which its default `--enforce-node-allocatable=pods`
  turns on; ephemera always does).
- `observe(summary)` derives the signal observations (available and capacity) from a
  `Summary`: `memory.available` from the node's memory (available = capacity - working
  set, capacity = available + working set), `allocatableMemory.available` from the `pods`
  system container's, `nodefs.*` from the node fs, `imagefs.*` from the runtime's imageFs,
  `pid.available` from the node's rlimit (maxpid - curproc, of maxpid).
- `thresholds_met(thresholds, observations)` keeps the thresholds whose quantity (absolute, or
  `int(capacity * percentage)` with upstream's float32 percentage) is greater than what is
  available; `node_conditions(thresholds)` maps them to `DiskPressure` (and `MemoryPressure`
  / `PIDPressure` for those signals).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ephemera.api.quantity import Quantity, QuantityFormat, parse_quantity
from ephemera.kubelet.stats.provider import (
    SYSTEM_CONTAINER_PODS,
    FsStats,
    MemoryStats,
    Summary,
)

__all__ = [
    "DEFAULT_EVICTION_HARD",
    "DISK_PRESSURE",
    "MEMORY_PRESSURE",
    "PID_PRESSURE",
    "RESOURCE_INODES",
    "SIGNAL_ALLOCATABLE_MEMORY_AVAILABLE",
    "SIGNAL_IMAGE_FS_AVAILABLE",
    "SIGNAL_IMAGE_FS_INODES_FREE",
    "SIGNAL_MEMORY_AVAILABLE",
    "SIGNAL_NODE_FS_AVAILABLE",
    "SIGNAL_NODE_FS_INODES_FREE",
    "SIGNAL_PID_AVAILABLE",
    "Observation",
    "Threshold",
    "ThresholdError",
    "hard_eviction_reservation",
    "node_conditions",
    "observe",
    "parse_eviction_hard",
    "parse_threshold",
    "signal_resource",
    "threshold_quantity",
    "thresholds_met",
    "without_container_fs",
]

SIGNAL_MEMORY_AVAILABLE: Final = "memory.available"
SIGNAL_ALLOCATABLE_MEMORY_AVAILABLE: Final = "allocatableMemory.available"
SIGNAL_NODE_FS_AVAILABLE: Final = "nodefs.available"
SIGNAL_NODE_FS_INODES_FREE: Final = "nodefs.inodesFree"
SIGNAL_IMAGE_FS_AVAILABLE: Final = "imagefs.available"
SIGNAL_IMAGE_FS_INODES_FREE: Final = "imagefs.inodesFree"
SIGNAL_CONTAINER_FS_AVAILABLE: Final = "containerfs.available"
SIGNAL_CONTAINER_FS_INODES_FREE: Final = "containerfs.inodesFree"
SIGNAL_PID_AVAILABLE: Final = "pid.available"

MEMORY_PRESSURE: Final = "MemoryPressure"
DISK_PRESSURE: Final = "DiskPressure"
PID_PRESSURE: Final = "PIDPressure"

RESOURCE_INODES: Final = "inodes"

# Upstream's Linux defaults (defaults_linux.go, newer versions with imagefs.inodesFree).
DEFAULT_EVICTION_HARD: Final = (
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,"
    "imagefs.available<15%,imagefs.inodesFree<5%"
)

_SIGNALS: Final[dict[str, tuple[str, str]]] = {  # signal -> (node condition, resource)
    SIGNAL_MEMORY_AVAILABLE: (MEMORY_PRESSURE, "memory"),
    SIGNAL_ALLOCATABLE_MEMORY_AVAILABLE: (MEMORY_PRESSURE, "memory"),
    SIGNAL_NODE_FS_AVAILABLE: (DISK_PRESSURE, "ephemeral-storage"),
    SIGNAL_NODE_FS_INODES_FREE: (DISK_PRESSURE, RESOURCE_INODES),
    SIGNAL_IMAGE_FS_AVAILABLE: (DISK_PRESSURE, "ephemeral-storage"),
    SIGNAL_IMAGE_FS_INODES_FREE: (DISK_PRESSURE, RESOURCE_INODES),
    SIGNAL_CONTAINER_FS_AVAILABLE: (DISK_PRESSURE, "ephemeral-storage"),
    SIGNAL_CONTAINER_FS_INODES_FREE: (DISK_PRESSURE, RESOURCE_INODES),
    SIGNAL_PID_AVAILABLE: (PID_PRESSURE, "pids"),
}


class ThresholdError(ValueError):
    """A threshold statement upstream rejects; `str()` is upstream's message."""


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass(frozen=True)
class Threshold:
    """`signal < value`; `quantity` (absolute) or `percentage` (float32 fraction of
    capacity). Hard thresholds only (grace period 0)."""

    signal: str
    quantity: Quantity | None = None
    percentage: float = 0.0
    grace_period_seconds: float = 0.0

    @property
    def resource(self) -> str:
        return _SIGNALS[self.signal][1]

    @property
    def node_condition(self) -> str:
        return _SIGNALS[self.signal][0]


@dataclass(frozen=True)
class Observation:
    available: Quantity
    capacity: Quantity
    time: float


def signal_resource(signal: str) -> str:
    return _SIGNALS[signal][1]


def parse_threshold(signal: str, value: str) -> Threshold | None:
    """`parseThresholdStatement`: None for an ignored `0%`/`100%`."""
    if signal not in _SIGNALS:
        raise ThresholdError(f"unsupported eviction signal {signal}")
    if value.endswith("%"):
        if value in ("0%", "100%"):
            return None
        try:
            parsed = float(value.rstrip("%"))
        except ValueError as err:
            raise ThresholdError(
                f'strconv.ParseFloat: parsing "{value.rstrip("%")}": invalid syntax') from err
        percentage = _float32(_float32(parsed) / 100)
        if percentage < 0:
            raise ThresholdError(
                f"eviction percentage threshold {signal} must be >= 0%: {value}")
        if percentage > 1:
            raise ThresholdError(
                f"eviction percentage threshold {signal} must be <= 100%: {value}")
        return Threshold(signal, percentage=percentage)
    try:
        quantity = parse_quantity(value)
    except ValueError as err:
        raise ThresholdError(str(err)) from err
    if quantity.sign() <= 0:
        raise ThresholdError(f"eviction threshold {signal} must be positive: {quantity}")
    return Threshold(signal, quantity=quantity)


def parse_eviction_hard(flag: str | Mapping[str, str] | None) -> list[Threshold]:
    """The thresholds of `--eviction-hard` (a `signal<value,...` string or a mapping); the
    upstream defaults when `flag` is None."""
    if flag is None:
        flag = DEFAULT_EVICTION_HARD
    statements: dict[str, str] = {}
    if isinstance(flag, str):
        for pair in (p.strip() for p in flag.split(",")):
            if not pair:
                continue
            signal, sep, value = pair.partition("<")
            if not sep:
                raise ThresholdError(f"malformed pair, expect string<string: {pair}")
            statements[signal.strip()] = value.strip()
    else:
        statements = dict(flag)
    thresholds: list[Threshold] = []
    for signal, value in statements.items():
        threshold = parse_threshold(signal, value)
        if threshold is not None:
            thresholds.append(threshold)
    return thresholds + [
        Threshold(SIGNAL_ALLOCATABLE_MEMORY_AVAILABLE, t.quantity, t.percentage)
        for t in thresholds
        if t.signal == SIGNAL_MEMORY_AVAILABLE and t.grace_period_seconds == 0]


def without_container_fs(thresholds: Sequence[Threshold]) -> tuple[list[Threshold], list[str]]:
    """`thresholds` without the user's `containerfs.*` ones, and upstream's warning for each
    dropped (`UpdateContainerFsThresholds`)."""
    kept: list[Threshold] = []
    warnings: list[str] = []
    for threshold in thresholds:
        if threshold.signal in (SIGNAL_CONTAINER_FS_AVAILABLE, SIGNAL_CONTAINER_FS_INODES_FREE):
            kind = "hard" if threshold.grace_period_seconds == 0 else "soft"
            warnings.append(f"found {threshold.signal} for {kind} eviction. ignoring")
        else:
            kept.append(threshold)
    return kept, warnings


def threshold_quantity(threshold: Threshold, capacity: Quantity) -> Quantity:
    """`GetThresholdQuantity`: the absolute value, or `int64(capacity * percentage)` BinarySI."""
    if threshold.quantity is not None:
        return threshold.quantity
    return Quantity.from_int(int(float(capacity.value()) * threshold.percentage),
                             QuantityFormat.BINARY_SI)


def hard_eviction_reservation(thresholds: Sequence[Threshold],
                              capacity: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """What the hard thresholds hold back from allocatable (upstream's
    `hardEvictionReservation`): `memory.available` from memory, `nodefs.available` from
    ephemeral-storage, each as `GetThresholdQuantity` of that capacity."""
    reserved: dict[str, Quantity] = {}
    for threshold in thresholds:
        resource = {SIGNAL_MEMORY_AVAILABLE: "memory",
                    SIGNAL_NODE_FS_AVAILABLE: "ephemeral-storage"}.get(threshold.signal)
        if resource is not None:
            reserved[resource] = threshold_quantity(threshold,
                                                    capacity.get(resource, Quantity()))
    return reserved


def _fs_observations(fs: FsStats | None, available_signal: str, inodes_signal: str,
                     out: dict[str, Observation]) -> None:
    if fs is None:
        return
    if fs.available_bytes is not None and fs.capacity_bytes is not None:
        out[available_signal] = Observation(
            Quantity.from_int(fs.available_bytes, QuantityFormat.BINARY_SI),
            Quantity.from_int(fs.capacity_bytes, QuantityFormat.BINARY_SI), fs.time)
    if fs.inodes_free is not None and fs.inodes is not None:
        out[inodes_signal] = Observation(
            Quantity.from_int(fs.inodes_free, QuantityFormat.DECIMAL_SI),
            Quantity.from_int(fs.inodes, QuantityFormat.DECIMAL_SI), fs.time)


def _memory_observation(memory: MemoryStats | None, signal: str,
                        out: dict[str, Observation]) -> None:
    if memory is None or memory.available_bytes is None or memory.working_set_bytes is None:
        return
    out[signal] = Observation(
        Quantity.from_int(memory.available_bytes, QuantityFormat.BINARY_SI),
        Quantity.from_int(memory.available_bytes + memory.working_set_bytes,
                          QuantityFormat.BINARY_SI), memory.time)


def observe(summary: Summary) -> dict[str, Observation]:
    """`makeSignalObservations` for the memory, filesystem and pid signals (no swap)."""
    out: dict[str, Observation] = {}
    rlimit = summary.node.rlimit
    if rlimit is not None:
        out[SIGNAL_PID_AVAILABLE] = Observation(
            Quantity.from_int(rlimit.maxpid - rlimit.curproc, QuantityFormat.DECIMAL_SI),
            Quantity.from_int(rlimit.maxpid, QuantityFormat.DECIMAL_SI), rlimit.time)
    _memory_observation(summary.node.memory, SIGNAL_MEMORY_AVAILABLE, out)
    pods = summary.node.system_container(SYSTEM_CONTAINER_PODS)
    _memory_observation(None if pods is None else pods.memory,
                        SIGNAL_ALLOCATABLE_MEMORY_AVAILABLE, out)
    _fs_observations(summary.node.fs, SIGNAL_NODE_FS_AVAILABLE, SIGNAL_NODE_FS_INODES_FREE, out)
    _fs_observations(summary.node.image_fs, SIGNAL_IMAGE_FS_AVAILABLE,
                     SIGNAL_IMAGE_FS_INODES_FREE, out)
    return out


def thresholds_met(thresholds: Sequence[Threshold],
                   observations: Mapping[str, Observation]) -> list[Threshold]:
    """The thresholds whose quantity is greater than what is available (signals without an
    observation are not met)."""
    met: list[Threshold] = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        if threshold_quantity(threshold, observed.capacity) > observed.available:
            met.append(threshold)
    return met


def node_conditions(thresholds: Sequence[Threshold]) -> list[str]:
    """The node conditions the met `thresholds` set, in first-seen order."""
    conditions: list[str] = []
    for threshold in thresholds:
        if threshold.node_condition not in conditions:
            conditions.append(threshold.node_condition)
    return conditions
