"""`ApiClient`: the asynchronous HTTP client of the Kubernetes API, on aiohttp.

One client per component process, for any resource path:

    async with ApiClient(load_kubeconfig(path), user_agent="ephemera-scheduler") as api:
        pods = await api.list(resource_path("pods", namespace="default"))
        await api.create(resource_path("pods", "default", "p1", "binding"), binding)
        async for event in api.watch(resource_path("pods"), resource_version=rv):
            ...

Objects go in and come out as plain JSON dicts. A response that is not 2xx raises
`ephemera.api.errors.StatusError` built from the server's `Status` body (code, reason, message,
details), so callers test `err.code == 404` or `err.reason == "Conflict"` exactly as the server
said it. A connection that cannot be made or breaks raises `ApiUnavailable`. A watch yields
`WatchEvent`s; an `ERROR` event in the stream (for example `410 Expired`) raises the
`StatusError` it carries. A 429 with `Retry-After` (the apiserver's priority filter under
saturation) is sent again after that many seconds, up to 10 times, as client-go does.
Nothing else in ephemera speaks HTTP to the apiserver.

Several apiservers: `ApiClient(config, endpoints=[URL, ...])` knows more servers than the
kubeconfig's (same credentials, same CA). An `EndpointPicker` (`ephemera.client.endpoints`)
keeps the current one; a request whose connection cannot be made (nothing was sent) is tried
at once on the next server, so callers see a failover as one slower request. A connection that
breaks after the request went out is not retried (the write may have happened): it raises
`ApiUnavailable` and the next request goes to the next server. With several servers the connect
timeout is `FAILOVER_CONNECT_TIMEOUT` (1 s) instead of 10 s, so that a server that does not
answer at all is left within 2 seconds.

Requests in flight: at most `max_requests` (100) at once per client; the others wait their
turn, in order, before their deadline (`request_timeout`) starts. client-go has no such wait
(Go's HTTP/2 transport multiplexes any number of requests), so a deadline that counted it
would fail requests the server never saw: a process that queues many writes (the hollow
nodes' thousand nodes) lost them at a loaded apiserver while the server answered each in
under a second. Watches take no turn: each holds a connection of its own for its life.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlencode

import aiohttp
import orjson

from ephemera.api.errors import StatusError
from ephemera.client.endpoints import EndpointPicker
from ephemera.client.goerrors import request_error
from ephemera.client.kubeconfig import ClientConfig

__all__ = [
    "ApiClient",
    "ApiUnavailable",
    "PatchType",
    "WatchEvent",
    "resource_path",
    "status_error_from",
]

PatchType = Literal["json", "merge", "strategic", "apply"]

_PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
# The reason of a non-Status error response, by code (apimachinery's `reasonForError`).
_REASONS: Mapping[int, str] = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Gone",
    413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}

DEFAULT_REQUEST_TIMEOUT = 30.0
# Requests in flight at once per client (aiohttp's default connection limit, which this
# replaces: watches are not counted).
MAX_REQUESTS = 100
CONNECT_TIMEOUT = 10.0
# With several apiservers: give up connecting to one this soon and try the next.
FAILOVER_CONNECT_TIMEOUT = 1.0


# client-go's `maxRetries` (rest.Request): how often a request told to come back later
# (429 with `Retry-After`, as a saturated apiserver answers) is sent again.
MAX_RETRIES = 10


def _retry_after(resp: aiohttp.ClientResponse) -> int | None:
    """The seconds to wait before sending the request again: a 429 with a whole number of
    seconds in `Retry-After` (client-go's `checkWait`, which also retries 5xx with one;
    ephemera's clients retry only the 429 the apiserver's priority filter sends)."""
    if resp.status != 429:
        return None
    value = resp.headers.get("Retry-After", "")
    return int(value) if value.isdigit() else None


def _note_server(err: BaseException, server: str) -> None:
    """Note on `err` the apiserver the failed request went to: its message names that one,
    not the one the client has switched to since."""
    with contextlib.suppress(AttributeError):
        err.__dict__["ephemera_server"] = server


def _server_of(err: BaseException) -> str | None:
    server = getattr(err, "__dict__", {}).get("ephemera_server")
    return server if isinstance(server, str) else None


class ApiUnavailable(ConnectionError):
    """The apiserver could not be reached, or the connection broke mid-request."""


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: `ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`, and the object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


def resource_path(plural: str, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None, *, group: str = "",
                  version: str = "v1") -> str:
    """The URL path of a collection, an object or a subresource:
    `resource_path("pods", "default", "p1", "binding")` is
    `/api/v1/namespaces/default/pods/p1/binding`; `group="coordination.k8s.io"` gives
    `/apis/coordination.k8s.io/v1/...`."""
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def _query(params: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


_WARNING = re.compile(r'^\d{3} \S+ "(.*)"')


def warning_text(header: str) -> str:
    """The text of a `Warning` header (`299 - "text"`, the text Go-quoted)."""
    match = _WARNING.match(header)
    if match is None:
        return header
    try:
        text = ast.literal_eval('"' + match.group(1) + '"')  # Go's escapes are Python's too
    except (ValueError, SyntaxError):
        return match.group(1)
    return str(text)


def _status_error(code: int, body: bytes) -> StatusError:
    """The `StatusError` of an error response: from its `Status` body when it has one."""
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        return status_error_from(parsed, code)
    text = body.decode(errors="replace").strip()
    if not text:
        try:
            text = HTTPStatus(code).phrase
        except ValueError:
            text = f"HTTP {code}"
    return StatusError(code, _REASONS.get(code, "Unknown"), text)


def status_error_from(status: Mapping[str, Any], code: int = 0) -> StatusError:
    """A `StatusError` from a `Status` object (an error response or a watch `ERROR` event)."""
    details = status.get("details")
    retry = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return StatusError(int(status.get("code") or code or 500), str(status.get("reason") or ""),
                       str(status.get("message") or ""),
                       details if isinstance(details, dict) else None,
                       retry_after=int(retry) if isinstance(retry, int) else None)


class ApiClient:
    """An asynchronous Kubernetes API client for one server and one user.

    Use it as an async context manager (or call `close()`). Every method takes a URL path
    (see `resource_path`) and extra query parameters as keyword arguments; booleans are sent
    as `true`/`false`, None values are left out.
    """

    def __init__(self, config: ClientConfig, *, user_agent: str = "ephemera",
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 on_warning: Callable[[str], None] | None = None,
                 endpoints: Sequence[str] = (), max_requests: int = MAX_REQUESTS) -> None:
        """`on_warning` receives the text of each `Warning` header the apiserver sends
        (client-go's WarningHandler); without it warnings are dropped. `endpoints`: apiserver
        URLs to use, in order of preference, before the kubeconfig's server (which is always
        kept as one of them). `max_requests`: requests in flight at once (see the module
        docstring)."""
        self.config = config
        self.on_warning = on_warning
        self.endpoints = EndpointPicker([*endpoints, config.server])
        self.user_agent = user_agent
        self.request_timeout = request_timeout
        # The turns of requests in flight (FIFO); made on first use, in the caller's loop.
        self.max_requests = max_requests
        self._turns: asyncio.Semaphore | None = None
        self._ssl = config.ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # Responses being read: ended by `set_client_certificate` (a closed session does not
        # wake their readers).
        self._responses: set[aiohttp.ClientResponse] = set()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def set_client_certificate(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Present this client certificate from now on (a kubelet's rotated one): a new TLS
        context and a new connection pool; the old pool is closed, its requests and watches
        end (and are retried by their callers), as client-go's certificate rotation closes
        every connection made with the old certificate."""
        self.config = dataclasses.replace(self.config, client_cert_pem=cert_pem,
                                          client_key_pem=key_pem)
        self._ssl = self.config.ssl_context()
        old, self._session = self._session, None
        for resp in self._responses:
            resp.content.set_exception(ApiUnavailable(
                "connection closed: the client certificate was rotated"))
        self._responses.clear()
        if old is not None:
            task = asyncio.get_running_loop().create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"User-Agent": self.user_agent, "Accept": "application/json"}
            if self.config.token:
                headers["Authorization"] = f"Bearer {self.config.token}"
            # No connection limit: requests wait for a turn (`_turn`), watches for nothing.
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False,
                                             limit=0)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=headers, json_serialize=lambda o: orjson.dumps(o)
                .decode())
        return self._session

    @property
    def server(self) -> str:
        """The base URL of the apiserver in use now."""
        return self.endpoints.current()

    @property
    def connect_timeout(self) -> float:
        return FAILOVER_CONNECT_TIMEOUT if len(self.endpoints.urls) > 1 else CONNECT_TIMEOUT

    def _url(self, path: str, server: str | None = None) -> str:
        return (server or self.server) + (path if path.startswith("/") else "/" + path)

    def _full_url(self, path: str, query: Mapping[str, str], server: str | None = None) -> str:
        """The URL with its query, as Go's `url.Values.Encode` writes it (keys sorted)."""
        encoded = urlencode(sorted(query.items()))
        return self._url(path, server) + ("?" + encoded if encoded else "")

    def _turn(self) -> asyncio.Semaphore:
        """Held by a request while it is in flight (at most `max_requests` at once)."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.max_requests)
        return self._turns

    @contextlib.asynccontextmanager
    async def _send(self, method: str, path: str, *, timeout: aiohttp.ClientTimeout,
                    **kwargs: Any) -> AsyncIterator[aiohttp.ClientResponse]:
        """A response from the first server that accepts the connection (see the module
        docstring); the last connection error when none does. While the caller reads it, the
        response is one `set_client_certificate` ends."""
        last: Exception | None = None
        for server in self.endpoints.candidates():
            try:
                resp_cm = self._client().request(
                    method, self._url(path, server), timeout=timeout,
                    server_hostname=self.config.tls_server_name, **kwargs)
                resp = await resp_cm.__aenter__()
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as err:
                self.endpoints.failed(server, str(err) or type(err).__name__)
                _note_server(err, server)
                last = err
                continue
            except (aiohttp.ClientError, OSError) as err:
                # Sent, then broken: not retried here; the next request goes elsewhere.
                self.endpoints.failed(server, str(err) or type(err).__name__)
                _note_server(err, server)
                raise
            self.endpoints.succeeded(server)
            self._responses.add(resp)
            try:
                yield resp
            except (aiohttp.ClientError, OSError) as err:
                _note_server(err, server)
                raise
            finally:
                self._responses.discard(resp)
                resp.release()
            return
        assert last is not None
        raise last

    # -- the verbs ------------------------------------------------------------------------

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json",
                      params: Mapping[str, Any] | None = None,
                      request_timeout: float | None = None) -> Any:
        """One request; the decoded JSON response (None for an empty body).
        `request_timeout`: this request's bound instead of the client's (the heartbeats'
        shorter one, as upstream's kubelet gives its heartbeat client)."""
        data: bytes | None = None
        headers: dict[str, str] = {}
        if body is not None:
            if isinstance(body, bytes | str):
                data = body.encode() if isinstance(body, str) else body
            else:
                data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        # `sock_connect`, not `connect`: the dial is bounded, as Go's dialer bounds it.
        # The deadline starts once the request has its turn (see the module docstring).
        timeout = aiohttp.ClientTimeout(total=request_timeout or self.request_timeout,
                                        sock_connect=self.connect_timeout)
        try:
            for attempt in range(MAX_RETRIES + 1):
                async with self._turn(), \
                        self._send(method, path, params=_query(params), data=data,
                                   headers=headers, timeout=timeout) as resp:
                    raw = await resp.read()
                    wait = _retry_after(resp) if attempt < MAX_RETRIES else None
                    if wait is None:
                        if resp.status >= 400:
                            raise _status_error(resp.status, raw)
                        if self.on_warning is not None:
                            for header in resp.headers.getall("Warning", []):
                                self.on_warning(warning_text(header))
                        break
                await asyncio.sleep(wait)
        except ApiUnavailable:
            raise  # ended on purpose (set_client_certificate), already in words
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise ApiUnavailable(request_error(
                method, self._full_url(path, _query(params), _server_of(err)), err)) from err
        return orjson.loads(raw) if raw.strip() else None

    async def get(self, path: str, *, request_timeout: float | None = None,
                  **params: Any) -> dict[str, Any]:
        """GET an object (or any JSON document, such as `/version`)."""
        result: dict[str, Any] = await self.request("GET", path, params=params,
                                                    request_timeout=request_timeout)
        return result

    async def list(self, path: str, *, label_selector: str | None = None,
                   field_selector: str | None = None, limit: int | None = None,
                   **params: Any) -> dict[str, Any]:
        """GET a collection. With `limit`, the pages are fetched one by one (following
        `metadata.continue`) and returned as one list whose `metadata.resourceVersion` is the
        first page's (the snapshot all pages were read at)."""
        query = {"labelSelector": label_selector, "fieldSelector": field_selector,
                 "limit": limit, **params}
        first: dict[str, Any] = await self.request("GET", path, params=query)
        result = first
        token = (first.get("metadata") or {}).get("continue")
        while token:
            page: dict[str, Any] = await self.request("GET", path,
                                                      params={**query, "continue": token})
            result.setdefault("items", []).extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
        result.setdefault("metadata", {}).pop("continue", None)
        result["metadata"].pop("remainingItemCount", None)
        if result.get("items") is None:
            result["items"] = []
        return result

    async def create(self, path: str, body: Any, *, request_timeout: float | None = None,
                     **params: Any) -> dict[str, Any]:
        """POST to a collection (or to a subresource such as `pods/NAME/binding`)."""
        result: dict[str, Any] = await self.request("POST", path, body, params=params,
                                                    request_timeout=request_timeout)
        return result

    async def update(self, path: str, body: Any, *, request_timeout: float | None = None,
                     **params: Any) -> dict[str, Any]:
        """PUT an object or a subresource (`/status`, `/dynamic`)."""
        result: dict[str, Any] = await self.request("PUT", path, body, params=params,
                                                    request_timeout=request_timeout)
        return result

    async def patch(self, path: str, body: Any, *, patch_type: PatchType = "strategic",
                    request_timeout: float | None = None, **params: Any) -> dict[str, Any]:
        """PATCH with a JSON patch (a list), a merge or strategic merge patch (a dict), or a
        server-side apply (a dict or YAML text; pass `fieldManager=`)."""
        result: dict[str, Any] = await self.request(
            "PATCH", path, body, content_type=_PATCH_CONTENT_TYPES[patch_type], params=params,
            request_timeout=request_timeout)
        return result

    async def delete(self, path: str, body: Any = None, **params: Any) -> dict[str, Any]:
        """DELETE an object (or a collection); `body` may be DeleteOptions. The response is
        the deleted (or terminating) object, or a Status."""
        result: dict[str, Any] = await self.request("DELETE", path, body, params=params)
        return result

    async def watch(self, path: str, *, resource_version: str | None = None,
                    label_selector: str | None = None, field_selector: str | None = None,
                    timeout_seconds: int | None = None, allow_bookmarks: bool = True,
                    **params: Any) -> AsyncIterator[WatchEvent]:
        """The events of `GET path?watch=true` until the server ends the stream.

        An `ERROR` event raises its `StatusError` (a 410 `Expired` means: list again); a broken
        connection raises `ApiUnavailable`.
        """
        query = _query({"watch": True, "resourceVersion": resource_version,
                        "labelSelector": label_selector, "fieldSelector": field_selector,
                        "timeoutSeconds": timeout_seconds,
                        "allowWatchBookmarks": allow_bookmarks or None, **params})
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout,
                                        sock_read=None)
        try:
            async with self._send("GET", path, params=query, timeout=timeout) as resp:
                if resp.status >= 400:
                    raise _status_error(resp.status, await resp.read())
                async for line in _lines(resp.content):
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise status_error_from(obj)
                    yield WatchEvent(str(event.get("type")), obj)
        except ApiUnavailable:
            raise  # ended on purpose (set_client_certificate), already in words
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise ApiUnavailable(request_error(
                "GET", self._full_url(path, query, _server_of(err)), err)) from err
        except orjson.JSONDecodeError as err:
            raise ApiUnavailable(f"watch {path}: undecodable event: {err}") from err


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-separated lines of any length (a watch event can be large)."""
    pending = bytearray()
    async for chunk in stream.iter_any():
        start = len(pending)
        pending += chunk
        end = pending.find(b"\n", start)
        while end >= 0:
            line = bytes(pending[:end])
            del pending[:end + 1]
            if line.strip():
                yield line
            end = pending.find(b"\n")
    if pending.strip():
        yield bytes(pending)  # a last line without its newline (undecodable if cut short)
