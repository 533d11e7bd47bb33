"""`ephemera.api.listoptions`: upstream's list and watch option rules with their exact
messages (the cases of apimachinery's validation_test.go and apiserver's interfaces_test.go),
the continue token codec, and the read each request asks of the store."""

from __future__ import annotations

import base64
import json

import pytest

from ephemera.api import listoptions
from ephemera.api.errors import StatusError
from ephemera.api.listoptions import ListOptions, ListRead, WatchRead

NOT_OLDER = "NotOlderThan"


def messages(**options: object) -> list[str]:
    return [str(e) for e in listoptions.validate(ListOptions(**options))]  # type: ignore[arg-type]


def test_valid_lists_and_watches() -> None:
    assert messages() == []
    assert messages(resource_version="5", resource_version_match="Exact") == []
    assert messages(resource_version="0", resource_version_match=NOT_OLDER) == []
    assert messages(watch=True) == []
    assert messages(watch=True, send_initial_events=True, resource_version_match=NOT_OLDER) == []
    assert messages(watch=True, send_initial_events=False, resource_version_match=NOT_OLDER) == []


def test_list_rules_report_every_violation() -> None:
    assert messages(resource_version_match="Exact") == [
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided"]
    assert messages(resource_version_match="Exact", resource_version="0") == [
        'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
        'resourceVersion "0"']
    assert messages(resource_version_match="Newest", continue_token="abc",
                    send_initial_events=True) == [
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided",
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is "
        "provided",
        'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", '
        '"NotOlderThan", ""',
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"]
    assert messages(send_initial_events=False) == [
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"]


def test_watch_rules() -> None:
    assert messages(watch=True, resource_version="5", resource_version_match=NOT_OLDER) == [
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
        "sendInitialEvents is provided"]
    assert messages(watch=True, send_initial_events=True) == [
        "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
        "resourceVersionMatch to NotOlderThan"]
    assert messages(watch=True, send_initial_events=True, resource_version_match="Exact") == [
        "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
        "resourceVersionMatch to NotOlderThan",
        'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"']
    assert messages(watch=True, send_initial_events=True, resource_version_match=NOT_OLDER,
                    continue_token="x") == [
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is "
        "provided"]


def test_watch_defaults_to_initial_events_from_unset_or_zero() -> None:
    for rv in ("", "0"):
        defaulted = listoptions.set_defaults(ListOptions(watch=True, resource_version=rv))
        assert (defaulted.send_initial_events, defaulted.resource_version_match) == (
            True, NOT_OLDER)
    for options in (ListOptions(watch=True, resource_version="7"), ListOptions(),
                    ListOptions(watch=True, send_initial_events=False,
                                resource_version_match=NOT_OLDER)):
        assert listoptions.set_defaults(options) == options


def test_invalid_options_are_one_422_with_every_cause() -> None:
    with pytest.raises(StatusError) as info:
        listoptions.list_options({"watch": "true", "resourceVersion": "3",
                                  "resourceVersionMatch": "Exact"})
    status = info.value.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, "
        'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"]')
    assert status["details"] == {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
        {"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
         "message": "Forbidden: resourceVersionMatch is forbidden for watch unless "
                    "sendInitialEvents is provided"},
        {"reason": "FieldValueNotSupported", "field": "resourceVersionMatch",
         "message": 'Unsupported value: "Exact": supported values: "NotOlderThan"'}]}


def test_query_conversion_as_apimachinery() -> None:
    decoded = listoptions.decode({"watch": "", "allowWatchBookmarks": "FALSE",
                                  "sendInitialEvents": "0", "limit": "-3"})
    assert (decoded.watch, decoded.allow_watch_bookmarks, decoded.send_initial_events,
            decoded.limit) == (True, False, False, -3)
    assert listoptions.decode({"sendInitialEvents": "yes"}).send_initial_events is True
    assert listoptions.decode({}).send_initial_events is None
    with pytest.raises(StatusError) as info:
        listoptions.decode({"limit": "1_000"})
    assert (info.value.code, info.value.message) == (
        400, 'strconv.ParseInt: parsing "1_000": invalid syntax')


@pytest.mark.parametrize(("text", "reason"), [
    ("abc", "invalid syntax"), ("-1", "invalid syntax"), ("+5", "invalid syntax"),
    ("18446744073709551616", "value out of range")])
def test_bad_resource_versions(text: str, reason: str) -> None:
    with pytest.raises(StatusError) as info:
        listoptions.parse_resource_version(text)
    assert (info.value.code, info.value.message) == (
        400, f'invalid resource version: resourceVersion: Invalid value: "{text}": '
             f'strconv.ParseUint: parsing "{text}": {reason}')
    assert listoptions.parse_resource_version("0") == 0
    assert listoptions.parse_resource_version("18446744073709551615") == 2**64 - 1


def _token(body: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()


def test_continue_tokens_round_trip() -> None:
    token = listoptions.encode_continue("default/p1", 42)
    payload = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    assert json.loads(payload) == {"v": "meta.k8s.io/v1", "rv": 42, "start": "default/p1\x00"}
    assert listoptions.decode_continue(token) == ("default/p1", 42)
    assert listoptions.decode_continue(listoptions.encode_continue("p", -1)) == ("p", -1)


@pytest.mark.parametrize(("token", "message"), [
    ("bogus!", "continue key is not valid: illegal base64 data at input byte 5"),
    ("abcde", "continue key is not valid: illegal base64 data at input byte 4"),
    (_token([1]), "continue key is not valid: json: cannot unmarshal array into Go value of "
                  "type storage.continueToken"),
    (_token({"v": "meta.k8s.io/v1", "rv": "7", "start": "a"}),
     "continue key is not valid: json: cannot unmarshal string into Go struct field "
     "continueToken.rv of type int64"),
    (_token({"v": "meta.k8s.io/v2", "rv": 7, "start": "a"}),
     "continue key is not valid: server does not recognize this encoded version "
     "meta.k8s.io/v2"),
    (_token({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"}),
     "continue key is not valid: incorrect encoded start resourceVersion (version "
     "meta.k8s.io/v1)"),
    (_token({"v": "meta.k8s.io/v1", "rv": 7, "start": ""}),
     "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"),
    (_token({"v": "meta.k8s.io/v1", "rv": 7, "start": "../kube-system/x"}),
     "continue key is not valid: ../kube-system/x"),
    (base64.urlsafe_b64encode(b"{").decode().rstrip("="),
     "continue key is not valid: unexpected end of JSON input"),
])
def test_bad_continue_tokens_are_400_with_upstreams_prefix(token: str, message: str) -> None:
    with pytest.raises(StatusError) as info:
        listoptions.list_read(ListOptions(continue_token=token))
    assert (info.value.code, info.value.reason, info.value.message) == (
        400, "BadRequest", f"invalid continue token: {message}")


def test_continue_with_a_resource_version_is_400() -> None:
    token = listoptions.encode_continue("p1", 9)
    with pytest.raises(StatusError) as info:
        listoptions.list_read(ListOptions(continue_token=token, resource_version="9"))
    assert (info.value.code, info.value.message) == (
        400, "specifying resource version is not allowed when using continue")
    assert listoptions.list_read(ListOptions(continue_token=token, resource_version="0",
                                             limit=2)) == ListRead(
        revision=9, start_after="p1", limit=2, continued=True)


@pytest.mark.parametrize(("options", "read"), [
    (ListOptions(), ListRead()),
    (ListOptions(limit=5), ListRead(limit=5)),
    (ListOptions(resource_version="0", limit=5), ListRead(consistent=False)),
    (ListOptions(resource_version="0", resource_version_match=NOT_OLDER, limit=5),
     ListRead(consistent=False)),
    (ListOptions(resource_version="12"), ListRead(min_revision=12, consistent=False)),
    (ListOptions(resource_version="12", limit=5), ListRead(revision=12, limit=5)),
    (ListOptions(resource_version="12", resource_version_match="Exact"), ListRead(revision=12)),
    (ListOptions(resource_version="12", resource_version_match=NOT_OLDER, limit=5),
     ListRead(min_revision=12, limit=5, consistent=False)),
    (ListOptions(resource_version="12", limit=-1), ListRead(min_revision=12, consistent=False)),
    (ListOptions(continue_token=listoptions.encode_continue("a/b", -1), limit=3),
     ListRead(start_after="a/b", limit=3, continued=True)),
])
def test_list_reads(options: ListOptions, read: ListRead) -> None:
    assert listoptions.list_read(options) == read


@pytest.mark.parametrize(("query", "read"), [
    ({}, WatchRead(initial_events=True)),
    ({"resourceVersion": "0", "allowWatchBookmarks": "true"},
     WatchRead(initial_events=True, end_bookmark=True, consistent=False)),
    ({"resourceVersion": "8"}, WatchRead(initial_events=False, after=8)),
    ({"resourceVersion": "8", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
      "resourceVersionMatch": NOT_OLDER},
     WatchRead(initial_events=True, min_revision=8, end_bookmark=True, consistent=False)),
    ({"sendInitialEvents": "false", "resourceVersionMatch": NOT_OLDER},
     WatchRead(initial_events=False)),
    ({"resourceVersion": "8", "sendInitialEvents": "false", "resourceVersionMatch": NOT_OLDER},
     WatchRead(initial_events=False, after=8)),
])
def test_watch_reads(query: dict[str, str], read: WatchRead) -> None:
    assert listoptions.watch_read(listoptions.list_options({**query, "watch": "1"})) == read


def test_too_large_resource_version_status() -> None:
    err = listoptions.too_large_resource_version(20, 11)
    assert err.retry_after == 1
    assert err.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Timeout: Too large resource version: 20, current: 11", "reason": "Timeout",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version"}],
                    "retryAfterSeconds": 1},
        "code": 504}
