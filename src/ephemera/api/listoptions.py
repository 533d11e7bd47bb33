"""List, get and watch options, read as upstream's apiserver reads them, and the read each
one asks of the store. The one place for:

- decoding the query (`ListOptions`): `resourceVersion`, `resourceVersionMatch`, `continue`,
  `limit`, `timeoutSeconds`, and the flags `watch`, `allowWatchBookmarks`, `sendInitialEvents`
  with apimachinery's query conversion (`0` or `false`, any case, is false; any other value,
  the empty one included, is true; an integer that does not parse is a 400);
- the defaults (`SetListOptionsDefaults`, the WatchList feature being on as upstream's v1.34+
  default): a watch from resourceVersion unset or `0` that sets neither `sendInitialEvents` nor
  `resourceVersionMatch` sends initial events (`NotOlderThan`);
- the validation (`ValidateListOptions`): every violated rule, as one 422 Invalid
  `ListOptions.meta.k8s.io`;
- the storage's checks (`storage.ValidateListOptions`, `storage/continue.go`): a continue token
  that does not decode is a 400 `invalid continue token: ...`, a continue token together with a
  resourceVersion other than `0` a 400, a resourceVersion that is not a number a 400
  `invalid resource version: ...`;
- the read consistency (the watch cache's and the etcd3 store's rules, `ListRead`,
  `WatchRead`, `get_min_revision`):

  | request                                    | reads                                      |
  |--------------------------------------------|--------------------------------------------|
  | list, get: resourceVersion unset           | the newest revision (consistent read)      |
  | list, get: resourceVersion `0`             | any revision: a list from the watch cache  |
  |                                            | (its `limit` ignored, as upstream's), a    |
  |                                            | get from the store                         |
  | list: `N`, match `Exact`                   | exactly revision N (410 once compacted)    |
  | list: `N` with a `limit`, no match         | exactly revision N (legacy exact match)    |
  | list: `N`, `NotOlderThan` or no match;     | the newest revision, not older than N (the |
  | get: `N`                                   | watch cache's once it has reached N)       |
  | list: a continue token                     | exactly the token's revision (410 with a   |
  |                                            | fresh token once compacted); a token of    |
  |                                            | revision -1: the newest                    |
  | watch: initial events                      | the state at the newest revision, not      |
  |                                            | older than N (from the watch cache unless  |
  |                                            | resourceVersion is unset), then the        |
  |                                            | changes after it                           |
  | watch: `N` without initial events          | the changes after N (from the watch cache  |
  |                                            | while its window holds them)               |
  | watch: unset or `0` without initial events | the changes after the newest revision      |

  A revision newer than the store's waits for it at most `BLOCK_TIMEOUT` seconds (the watch
  cache's wait), then answers 504 `Timeout: Too large resource version: N, current: M` with
  `Retry-After: 1` (`too_large_resource_version`);
- and the 410 messages of lists (`LIST_EXPIRED`, `ExpiredContinue`).

Where upstream answers 500 (a get or a watch whose resourceVersion is not a number, which its
storage reports with an error that is not a Status), ephemera answers the list's 400.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ephemera.api import errors, field
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote

EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
CONTINUE_VERSION = "meta.k8s.io/v1"

# How long a read of a revision newer than the store's waits for it (the watch cache's
# `blockTimeout`), and the Retry-After of the 504 that follows (its
# `resourceVersionTooHighRetrySeconds`).
BLOCK_TIMEOUT = 3.0
TOO_LARGE_RETRY_SECONDS = 1

LIST_EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)

_UINT64_MAX = 2**64 - 1
_INT64_MAX = 2**63 - 1
_DIGITS = re.compile(r"[0-9]+")
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+")


# --- Status errors of reads -----------------------------------------------------------------


def too_large_resource_version(requested: int, current: int,
                               retry_seconds: int = TOO_LARGE_RETRY_SECONDS) -> StatusError:
    """upstream's `storage.NewTooLargeResourceVersionError`: a 504 Timeout."""
    details: dict[str, Any] = {"causes": [{"reason": "ResourceVersionTooLarge",
                                           "message": "Too large resource version"}]}
    if retry_seconds:
        details["retryAfterSeconds"] = retry_seconds
    return StatusError(
        504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
        details, retry_after=retry_seconds or None)


class ExpiredContinue(StatusError):
    """410 Expired for a continue token whose revision was compacted, carrying a fresh token
    (`metadata.continue`) that continues at the newest revision, as upstream does."""

    def __init__(self, message: str, continue_token: str = "") -> None:
        super().__init__(410, "Expired", message)
        self.continue_token = continue_token

    def status(self) -> dict[str, Any]:
        body = super().status()
        if self.continue_token:
            body["metadata"] = {"continue": self.continue_token}
        return body


# --- query decoding -------------------------------------------------------------------------


def query_flag(query: Mapping[str, str], name: str) -> bool | None:
    """A boolean query parameter as apimachinery converts it: None when absent, false for
    `0` or `false` (any case), true for anything else."""
    value = query.get(name)
    if value is None:
        return None
    return not (value == "0" or value.lower() == "false")


def _parse_int(text: str) -> int:
    """Go's `strconv.ParseInt(text, 10, 64)`, with its error text."""
    if not _SIGNED_DIGITS.fullmatch(text):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def query_int(query: Mapping[str, str], name: str) -> int | None:
    """An integer query parameter: None when absent or empty; 400 when it does not parse."""
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        return _parse_int(value)
    except ValueError as err:
        raise errors.bad_request(str(err)) from None


@dataclass(frozen=True)
class ListOptions:
    """The options of a list or a watch (upstream's internal `ListOptions`, less the
    selectors)."""

    watch: bool = False
    resource_version: str = ""
    resource_version_match: str = ""
    continue_token: str = ""
    limit: int = 0
    send_initial_events: bool | None = None
    allow_watch_bookmarks: bool = False
    timeout_seconds: int | None = None


def decode(query: Mapping[str, str]) -> ListOptions:
    """The options of a query, as apimachinery's parameter codec decodes them."""
    return ListOptions(
        watch=bool(query_flag(query, "watch")),
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get("resourceVersionMatch", ""),
        continue_token=query.get("continue", ""),
        limit=query_int(query, "limit") or 0,
        send_initial_events=query_flag(query, "sendInitialEvents"),
        allow_watch_bookmarks=bool(query_flag(query, "allowWatchBookmarks")),
        timeout_seconds=query_int(query, "timeoutSeconds"),
    )


def set_defaults(options: ListOptions) -> ListOptions:
    """upstream's `SetListOptionsDefaults` with the WatchList feature on."""
    if options.send_initial_events is not None or options.resource_version_match:
        return options
    if options.watch and options.resource_version in ("", "0"):
        return replace(options, send_initial_events=True,
                       resource_version_match=NOT_OLDER_THAN)
    return options


def validate(options: ListOptions) -> list[field.FieldError]:
    """upstream's `ValidateListOptions` (WatchList on): every rule the options break."""
    match = options.resource_version_match
    errs: list[field.FieldError] = []
    if options.watch:
        if options.send_initial_events is not None and match != NOT_OLDER_THAN:
            errs.append(field.forbidden("resourceVersionMatch",
                                        "sendInitialEvents requires setting "
                                        f"resourceVersionMatch to {NOT_OLDER_THAN}"))
        if match:
            if options.send_initial_events is None:
                errs.append(field.forbidden("resourceVersionMatch",
                                            "resourceVersionMatch is forbidden for watch "
                                            "unless sendInitialEvents is provided"))
            if match != NOT_OLDER_THAN:
                errs.append(field.not_supported("resourceVersionMatch", match,
                                                [NOT_OLDER_THAN]))
            if options.continue_token:
                errs.append(field.forbidden("resourceVersionMatch",
                                            "resourceVersionMatch is forbidden when continue "
                                            "is provided"))
        return errs
    if match:
        if not options.resource_version:
            errs.append(field.forbidden("resourceVersionMatch",
                                        "resourceVersionMatch is forbidden unless "
                                        "resourceVersion is provided"))
        if options.continue_token:
            errs.append(field.forbidden("resourceVersionMatch",
                                        "resourceVersionMatch is forbidden when continue is "
                                        "provided"))
        if match not in (EXACT, NOT_OLDER_THAN):
            errs.append(field.not_supported("resourceVersionMatch", match,
                                            [EXACT, NOT_OLDER_THAN, ""]))
        if match == EXACT and options.resource_version == "0":
            errs.append(field.forbidden("resourceVersionMatch",
                                        'resourceVersionMatch "exact" is forbidden for '
                                        'resourceVersion "0"'))
    if options.send_initial_events is not None:
        errs.append(field.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for "
                                                         "list"))
    return errs


def list_options(query: Mapping[str, str], *, watch: bool | None = None) -> ListOptions:
    """The decoded, defaulted and validated options of a list or watch request (`watch`:
    what the route decided, else the query's `watch`); 422 with every broken rule."""
    options = decode(query)
    if watch is not None:
        options = replace(options, watch=watch)
    options = set_defaults(options)
    errs = validate(options)
    if errs:
        raise errors.invalid("ListOptions", "", errs, group="meta.k8s.io")
    return options


# --- resource versions ----------------------------------------------------------------------


def parse_resource_version(text: str) -> int:
    """upstream's `APIObjectVersioner.ParseResourceVersion`: 0 for unset or `0`, else an
    unsigned number; 400 `invalid resource version: ...` otherwise."""
    if text in ("", "0"):
        return 0
    if _DIGITS.fullmatch(text) and int(text) <= _UINT64_MAX:
        return int(text)
    reason = "value out of range" if _DIGITS.fullmatch(text) else "invalid syntax"
    cause = field.invalid("resourceVersion", text,
                          f"strconv.ParseUint: parsing {go_quote(text)}: {reason}")
    raise errors.bad_request(f"invalid resource version: {cause}")


def get_min_revision(resource_version: str) -> int:
    """The revision a get must not be older than (0: any): its resourceVersion."""
    return parse_resource_version(resource_version)


# --- continue tokens ------------------------------------------------------------------------


class ContinueError(ValueError):
    """A continue token that does not decode; the text is upstream's."""


def encode_continue(start_after: str, revision: int) -> str:
    """upstream's `storage.EncodeContinue`: unpadded base64url of `{"v","rv","start"}`,
    where start is the key suffix to continue after followed by a NUL (the first key
    after it)."""
    token = {"v": CONTINUE_VERSION, "rv": revision, "start": start_after + "\x00"}
    data = json.dumps(token, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def _raw_url_b64decode(token: str) -> bytes:
    """Go's `base64.RawURLEncoding.DecodeString`, with its error text."""
    bad = _BASE64URL.match(token)
    end = bad.end() if bad else 0
    if end < len(token):
        raise ContinueError(f"illegal base64 data at input byte {end}")
    if len(token) % 4 == 1:
        raise ContinueError(f"illegal base64 data at input byte {len(token) - 1}")
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except binascii.Error:  # not reached for the alphabet and lengths checked above
        raise ContinueError("illegal base64 data at input byte 0") from None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _unmarshal_token(data: bytes) -> tuple[str, int, str]:
    """(v, rv, start) as Go's `json.Unmarshal` into upstream's `continueToken` reads them;
    ContinueError with Go's text where it is one of the common ones."""
    generic = "continue key is not valid"
    try:
        decoded = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        if not data.strip():
            raise ContinueError(f"{generic}: unexpected end of JSON input") from None
        position = getattr(err, "pos", 0)
        text = data.decode("utf-8", "replace")
        if position >= len(text):
            raise ContinueError(f"{generic}: unexpected end of JSON input") from None
        char = text[position]
        raise ContinueError(f"{generic}: invalid character {_go_char(char)} looking for "
                            "beginning of value") from None
    if decoded is None:
        decoded = {}
    if not isinstance(decoded, dict):
        raise ContinueError(f"{generic}: json: cannot unmarshal {_json_type(decoded)} into Go "
                            "value of type storage.continueToken")
    fields = {k.lower(): v for k, v in decoded.items()}
    version, rv, start = fields.get("v"), fields.get("rv"), fields.get("start")
    for name, value, want in (("v", version, "string"), ("rv", rv, "int64"),
                              ("start", start, "string")):
        if value is None:
            continue
        ok = isinstance(value, str) if want == "string" else (
            isinstance(value, int) and not isinstance(value, bool)
            and -_INT64_MAX - 1 <= value <= _INT64_MAX)
        if not ok:
            shown = _json_type(value)
            if shown == "number":
                shown = f"number {json.dumps(value)}"
            raise ContinueError(f"{generic}: json: cannot unmarshal {shown} into Go struct "
                                f"field continueToken.{name} of type {want}")
    return version or "", rv or 0, start or ""


def _go_char(char: str) -> str:
    """Go's `%q` of a rune, as its JSON syntax errors quote the offending character."""
    if char == "'":
        return "'\\''"
    inner = go_quote(char)[1:-1]
    return "'" + inner.replace('\\"', '"') + "'"


def decode_continue(token: str) -> tuple[str, int]:
    """upstream's `storage.DecodeContinue`: (the key suffix to continue after, the revision;
    negative for the newest). ContinueError with upstream's text."""
    try:
        data = _raw_url_b64decode(token)
    except ContinueError as err:
        raise ContinueError(f"continue key is not valid: {err}") from None
    version, rv, start = _unmarshal_token(data)
    if version != CONTINUE_VERSION:
        raise ContinueError("continue key is not valid: server does not recognize this encoded "
                            f"version {version}")
    if rv == 0:
        raise ContinueError("continue key is not valid: incorrect encoded start resourceVersion "
                            f"(version {CONTINUE_VERSION})")
    if not start:
        raise ContinueError("continue key is not valid: encoded start key empty (version "
                            f"{CONTINUE_VERSION})")
    key = start if start.startswith("/") else "/" + start
    if _go_clean(key) != key:
        raise ContinueError(f"continue key is not valid: {start}")
    suffix = key[1:]
    return suffix[:-1] if suffix.endswith("\x00") else suffix, rv


def _go_clean(path: str) -> str:
    """Go's `path.Clean` of an absolute path (Python's normpath keeps a leading `//`)."""
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


# --- the reads ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListRead:
    """How a list reads the store."""

    revision: int = 0  # exactly this revision (0: the newest)
    min_revision: int = 0  # the newest, not older than this (0: any)
    start_after: str = ""  # the key suffix a continue token continues after
    limit: int = 0  # at most this many items (0: all)
    continued: bool = False  # a continue token asked for it (its 410 carries a fresh one)
    # The newest revision is asked for (no resourceVersion): read from the store, never from
    # the watch cache. False: any revision not older than `min_revision` will do.
    consistent: bool = True

    @property
    def cacheable(self) -> bool:
        """The watch cache may serve it (resourceVersion `0`, or "not older than")."""
        return not self.consistent and not self.revision and not self.continued


def list_read(options: ListOptions) -> ListRead:
    """The read a list's validated options ask for (`storage.ValidateListOptions`, then the
    watch cache's choice)."""
    limit = max(options.limit, 0)
    rv_text = options.resource_version
    if options.continue_token:
        try:
            start_after, token_revision = decode_continue(options.continue_token)
        except ContinueError as err:
            raise errors.bad_request(f"invalid continue token: {err}") from None
        if rv_text not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using "
                                     "continue")
        return ListRead(revision=max(token_revision, 0), start_after=start_after, limit=limit,
                        continued=True)
    revision = parse_resource_version(rv_text)
    if rv_text == "0":  # any revision, the whole list (the watch cache ignores the limit)
        return ListRead(consistent=False)
    match = options.resource_version_match
    if match == EXACT or (not match and limit and revision):
        return ListRead(revision=revision, limit=limit)
    return ListRead(min_revision=revision, limit=limit, consistent=not revision)


@dataclass(frozen=True)
class WatchRead:
    """How a watch reads the store."""

    initial_events: bool  # first the state, as ADDED events, then the changes after it
    min_revision: int = 0  # that state not older than this (0: any)
    after: int | None = None  # without initial events: the changes after this (None: now)
    end_bookmark: bool = False  # the `k8s.io/initial-events-end` bookmark after the state
    consistent: bool = True  # that state at the newest revision (no resourceVersion)

    @property
    def initial_list(self) -> ListRead:
        """The read of the initial state."""
        return ListRead(min_revision=self.min_revision, consistent=self.consistent)


def watch_read(options: ListOptions) -> WatchRead:
    """The read a watch's validated options ask for (the watch cache's rules)."""
    revision = parse_resource_version(options.resource_version)
    send = options.send_initial_events
    if send or (send is None and options.resource_version in ("", "0")):
        return WatchRead(initial_events=True, min_revision=revision,
                         end_bookmark=bool(send) and options.allow_watch_bookmarks,
                         consistent=options.resource_version == "")
    return WatchRead(initial_events=False, after=revision or None)
