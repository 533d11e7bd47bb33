"""Feature gate parsing, with upstream's error messages."""

from __future__ import annotations

import pytest

from ephemera.api.featuregates import (
    DEFAULTS,
    DYNAMIC_CONTAINERS,
    IMAGE_VOLUME,
    FeatureGateError,
    FeatureGates,
    parse_feature_gates,
)


def test_all_known_gates_default_to_true() -> None:
    gates = parse_feature_gates("")
    assert set(gates) == {
        "DynamicContainers", "DynamicNodeLocalEphemeralVolumes", "PodLevelResources",
        "PodLevelResourcesEphemeralStorage", "ImageVolume", "NodeDeclaredFeatures",
        "DynamicVolumeHotPlug",
    }
    assert all(gates.enabled(name) for name in DEFAULTS)
    assert gates.to_flag() == ""


def test_explicit_values_override_defaults() -> None:
    gates = parse_feature_gates(" DynamicContainers=false , ImageVolume=T,")
    assert gates.enabled(DYNAMIC_CONTAINERS) is False
    assert gates[IMAGE_VOLUME] is True
    assert gates.enabled("PodLevelResources") is True
    assert gates.to_flag() == "DynamicContainers=false,ImageVolume=true"
    assert parse_feature_gates(gates.to_flag()) == gates


def test_unknown_gate_is_named() -> None:
    with pytest.raises(FeatureGateError) as err:
        parse_feature_gates("DynamicContainers=true,NoSuchGate=true")
    assert str(err.value) == "unrecognized feature gate: NoSuchGate"


def test_missing_value() -> None:
    with pytest.raises(FeatureGateError) as err:
        parse_feature_gates("ImageVolume")
    assert str(err.value) == "missing bool value for ImageVolume"


def test_invalid_bool_uses_go_parse_bool_message() -> None:
    with pytest.raises(FeatureGateError) as err:
        parse_feature_gates("ImageVolume=yes")
    assert str(err.value) == (
        'invalid value of ImageVolume=yes, err: strconv.ParseBool: parsing "yes": invalid syntax'
    )


def test_querying_an_unknown_gate_fails() -> None:
    with pytest.raises(FeatureGateError):
        FeatureGates().enabled("Nope")
    with pytest.raises(FeatureGateError):
        FeatureGates({"Nope": True})
