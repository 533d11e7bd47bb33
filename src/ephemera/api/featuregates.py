"""Feature gates: the known gates, their defaults (`gate_enabled` reads a gate from any
mapping with them), and `--feature-gates K=V,...` parsing.

Parsing follows `k8s.io/component-base/featuregate` (`Set`, `SetFromMap`) so that the error
messages are upstream's: `unrecognized feature gate: X`, `missing bool value for X`,
`invalid value of X=Y, err: strconv.ParseBool: parsing "Y": invalid syntax`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

DYNAMIC_CONTAINERS = "DynamicContainers"
DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES = "DynamicNodeLocalEphemeralVolumes"
POD_LEVEL_RESOURCES = "PodLevelResources"
POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE = "PodLevelResourcesEphemeralStorage"
IMAGE_VOLUME = "ImageVolume"
NODE_DECLARED_FEATURES = "NodeDeclaredFeatures"
# ephemera's own: KEP-6395's next milestone ahead of upstream (live hot-plug of volume mounts
# into running containers, `dynamicVolumePolicy.restartPolicy: NotRequired`).
DYNAMIC_VOLUME_HOT_PLUG = "DynamicVolumeHotPlug"

# Every gate ephemera knows, with its default.
DEFAULTS: Mapping[str, bool] = {
    DYNAMIC_CONTAINERS: True,
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES: True,
    POD_LEVEL_RESOURCES: True,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE: True,
    IMAGE_VOLUME: True,
    NODE_DECLARED_FEATURES: True,
    DYNAMIC_VOLUME_HOT_PLUG: True,
}

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A `--feature-gates` value that upstream would reject; the message is upstream's."""


def gate_enabled(gates: Mapping[str, bool] | None, name: str) -> bool:
    """Whether feature gate `name` is on in `gates` (a `FeatureGates` or a plain mapping of
    overrides, as the pure pod rules take them): ephemera's default when `gates` is None or
    does not name it; an unknown gate is off."""
    default = DEFAULTS.get(name, False)
    return default if gates is None else bool(gates.get(name, default))


def parse_go_bool(value: str) -> bool:
    """Go's `strconv.ParseBool`."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


@dataclass(frozen=True)
class FeatureGates(Mapping[str, bool]):
    """The effective gates: the defaults overridden by what was set explicitly."""

    overrides: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.overrides:
            if name not in DEFAULTS:
                raise FeatureGateError(f"unrecognized feature gate: {name}")

    def enabled(self, name: str) -> bool:
        if name not in DEFAULTS:
            raise FeatureGateError(f"unrecognized feature gate: {name}")
        return self.overrides.get(name, DEFAULTS[name])

    def __getitem__(self, name: str) -> bool:
        return self.enabled(name)

    def __iter__(self) -> Iterator[str]:
        return iter(DEFAULTS)

    def __len__(self) -> int:
        return len(DEFAULTS)

    def to_flag(self) -> str:
        """The explicit settings as a `--feature-gates` value (sorted, as upstream prints)."""
        items = sorted(self.overrides.items())
        return ",".join(f"{k}={'true' if v else 'false'}" for k, v in items)


def parse_feature_gates(value: str | None) -> FeatureGates:
    """Parse `K=V,K2=V2` as upstream's `featureGate.Set` does; raise `FeatureGateError`."""
    overrides: dict[str, bool] = {}
    for part in (value or "").split(","):
        item = part.strip()
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {key}")
        raw = raw.strip()
        try:
            overrides[key] = parse_go_bool(raw)
        except ValueError as err:
            raise FeatureGateError(f"invalid value of {key}={raw}, err: {err}") from None
    for key in sorted(overrides):
        if key not in DEFAULTS:
            raise FeatureGateError(f"unrecognized feature gate: {key}")
    return FeatureGates(overrides)
