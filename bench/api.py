"""The API benchmark (`python -m bench.api`, `make bench`): a real `ephemera apiserver` over
HTTPS on the sqlite store and on the etcd store, against raw etcd as the floor, in one run.

Phases, each on every backend (N pods, C concurrent clients):
- create, sequential: N pod creates one after another (latency per request);
- create, C clients: N more pods from C keep-alive connections at once (throughput);
- get, sequential: a get of each of the N pods;
- list, all N: the whole namespace in one response, repeated;
- list, pages: the same N in pages of `--page-size` (limit/continue), the whole walk timed;
- watch: with a watch open on a namespace, create pods one at a time; the time from a
  create's response to its ADDED event arriving on the stream, and from sending the create.

Each phase also records the CPU time the apiserver, etcd and this client used and the KV
requests etcd handled, per operation: where the time goes.

The floor ("raw etcd") does the same with aetcd's gRPC stubs (the calls the etcd store
makes) against the same etcd server: Put of the very JSON values the apiserver stored, Range
of one key, Range of the prefix (with `limit` for pages), and a Watch stream. The HTTP client
is aiohttp with keep-alive; the apiserver is authenticated with the client certificate of the
admin kubeconfig it writes. Results go to stdout as Markdown (medians, p99, throughput, and
ratios apiserver-on-etcd / raw etcd and sqlite / etcd); progress goes to stderr, one line per
phase; `--json PATH` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import grpc
import orjson
from aetcd import rpc

from bench.common import (
    CLIENT,
    Apiserver,
    CpuMeter,
    EtcdRequestCounter,
    Measurement,
    collapsed_stacks_summary,
    format_ms,
    format_number,
    format_rate,
    log,
    machine_description,
    markdown_table,
    progress,
    py_spy_record,
    ratio,
    start_etcd,
)
from ephemera.store.etcd import bytes_prefix_end, grpc_target

DEFAULT_PODS = 1000
QUICK_PODS = 200
DEFAULT_CLIENTS = 8
DEFAULT_PAGE_SIZE = 100
DEFAULT_LIST_REPEATS = 50
QUICK_LIST_REPEATS = 10
WARMUP_REQUESTS = 50
EVENT_TIMEOUT = 10.0
RAW = "raw etcd"
STORES = ("sqlite", "etcd")

NS_SEQUENTIAL = "bench-seq"
NS_CONCURRENT = "bench-conc"
NS_WATCH = "bench-watch"
NS_WARMUP = "bench-warmup"

# Phase keys in their order; labels depend on the configuration.
PHASE_KEYS = ("create", "create_concurrent", "get", "list", "list_pages", "watch",
              "watch_send")


class BenchError(RuntimeError):
    """An unexpected answer: the benchmark stops rather than time errors."""


@dataclass
class Config:
    pods: int
    clients: int
    page_size: int
    list_repeats: int
    stores: list[str]
    work_dir: Path
    profile_dir: Path | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = {
            "create": "create, sequential",
            "create_concurrent": f"create, {self.clients} clients",
            "get": "get, sequential",
            "list": f"list, all {self.pods}",
            "list_pages": f"list, pages of {self.page_size}",
            "watch": "watch, response → event",
            "watch_send": "watch, write sent → event",
        }


def pod_name(index: int) -> str:
    return f"bench-{index:05d}"


def pod_manifest(name: str, namespace: str, index: int) -> dict[str, Any]:
    """A small but ordinary pod: labels, one container with a command and requests."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app": "bench", "shard": str(index % 10)}},
        "spec": {
            "containers": [{
                "name": "app",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    }


def stored_value(response_body: bytes) -> bytes:
    """What the apiserver stored for an object, near enough: its create response as compact
    JSON without the resourceVersion (the store keeps that as the key's revision)."""
    obj = orjson.loads(response_body)
    obj.get("metadata", {}).pop("resourceVersion", None)
    return orjson.dumps(obj)


async def timed_sequence(count: int, operation: Callable[[int], Awaitable[None]],
                         measurement: Measurement) -> None:
    """Run operation(0..count-1) one after another, recording each latency and the total."""
    latencies = measurement.latencies
    clock = time.perf_counter
    started = clock()
    for index in range(count):
        before = clock()
        await operation(index)
        latencies.append(clock() - before)
    measurement.elapsed = clock() - started


async def timed_concurrently(count: int, workers: int,
                             operation: Callable[[int], Awaitable[None]],
                             measurement: Measurement) -> None:
    """Run operation(0..count-1) from `workers` tasks pulling from one queue of indexes."""
    indexes: Iterator[int] = iter(range(count))
    latencies = measurement.latencies
    clock = time.perf_counter

    async def worker() -> None:
        for index in indexes:
            before = clock()
            await operation(index)
            latencies.append(clock() - before)

    started = clock()
    async with asyncio.TaskGroup() as group:
        for _ in range(workers):
            group.create_task(worker())
    measurement.elapsed = clock() - started


class Phases:
    """The measurements of one backend, phase by phase. `phase(key, what)` wraps a phase: a
    progress line, the CPU time of the processes of `meter` and the requests etcd handled
    (given to every measurement made in it), and with --py-spy the process `profiled_pid`
    sampled into the profile dir."""

    def __init__(self, backend: str, cfg: Config, meter: CpuMeter,
                 etcd_counter: EtcdRequestCounter | None = None,
                 profiled_pid: int | None = None) -> None:
        self.backend = backend
        self.cfg = cfg
        self.meter = meter
        self.etcd_counter = etcd_counter
        self.profiled_pid = profiled_pid
        self.results: list[Measurement] = []

    def new(self, key: str, note: str = "") -> Measurement:
        m = Measurement(self.cfg.labels[key], self.backend, note=note)
        self.results.append(m)
        return m

    @contextlib.contextmanager
    def phase(self, key: str, what: str) -> Iterator[None]:
        first = len(self.results)
        with contextlib.ExitStack() as stack:
            stack.enter_context(progress(f"[{self.backend}] {what}"))
            profile_dir = self.cfg.profile_dir
            if profile_dir is not None and self.profiled_pid is not None:
                output = profile_dir / f"{self.backend.replace(' ', '-')}-{key}.txt"
                stack.callback(lambda: output.with_suffix(".summary").write_text(
                    collapsed_stacks_summary(output)))  # runs after py-spy has stopped
                stack.enter_context(py_spy_record(self.profiled_pid, output))
            requests_before = self.etcd_counter.snapshot() if self.etcd_counter else {}
            before = self.meter.snapshot()
            yield
            used = self.meter.since(before)
            requests = self.etcd_counter.since(requests_before) if self.etcd_counter else {}
        for m in self.results[first:]:
            m.cpu.update(used)
            m.etcd_requests.update(requests)


# --- the apiserver -------------------------------------------------------------------------


class ApiClient:
    """aiohttp keep-alive sessions to one apiserver: `requests` for up to `connections` at
    once, and `watches` for long-lived streams."""

    def __init__(self, server: Apiserver, connections: int) -> None:
        if server.ssl_context is None:
            raise BenchError("the apiserver is not started")
        self.base = server.url
        connector = aiohttp.TCPConnector(ssl=server.ssl_context, limit=connections)
        self.session = aiohttp.ClientSession(connector=connector)
        self.watch_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=server.ssl_context),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None))

    async def close(self) -> None:
        await self.session.close()
        await self.watch_session.close()

    async def call(self, method: str, path: str, body: bytes | None = None,
                   expect: Sequence[int] = (200,)) -> bytes:
        headers = {"Content-Type": "application/json"} if body is not None else None
        async with self.session.request(method, self.base + path, data=body,
                                        headers=headers) as response:
            data = await response.read()
            if response.status not in expect:
                raise BenchError(f"{method} {path}: {response.status} {data[:500]!r}")
            return data


def pods_path(namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/pods"
    return f"{path}/{name}" if name else path


def encoded_pods(namespace: str, count: int) -> list[bytes]:
    return [orjson.dumps(pod_manifest(pod_name(i), namespace, i)) for i in range(count)]


def list_metadata(body: bytes) -> dict[str, Any]:
    """A list response with only its `metadata` decoded (the continue token), so that a timed
    walk through pages does not time this client decoding every item; the whole body when it
    is not laid out as `{..."metadata":{...},"items":[...]}`."""
    head, found, _ = body.partition(b',"items":[')
    if found:
        try:
            decoded: dict[str, Any] = orjson.loads(head + b"}")
            if isinstance(decoded.get("metadata"), dict):
                return decoded
        except orjson.JSONDecodeError:
            pass
    whole: dict[str, Any] = orjson.loads(body)
    return whole


async def ensure_namespace(api: ApiClient, name: str) -> None:
    body = orjson.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await api.call("POST", "/api/v1/namespaces", body, expect=(201, 409))


async def watch_latencies(open_stream: Callable[[], Awaitable[AsyncStream]],
                          write: Callable[[int], Awaitable[None]], count: int,
                          from_response: Measurement, from_send: Measurement) -> None:
    """With a stream open, write(i) one at a time and wait for the stream to deliver the
    event named i: the time from the write's response to the event (`from_response`; below
    zero when the event came first) and from sending the write to the event (`from_send`).
    The stream reader timestamps each event before decoding it."""
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[float]] = {}
    stream = await open_stream()

    async def read() -> None:
        async for arrived, index in stream.events():
            future = waiting.get(index)
            if future is not None and not future.done():
                future.set_result(arrived)

    reader = loop.create_task(read())
    clock = time.perf_counter
    started = clock()
    try:
        for index in range(count):
            future = waiting[index] = loop.create_future()
            sent = clock()
            await write(index)
            answered = clock()
            try:
                arrived = await asyncio.wait_for(future, EVENT_TIMEOUT)
            except TimeoutError:
                if reader.done() and reader.exception() is not None:
                    raise BenchError(f"watch stream failed: {reader.exception()}") from None
                raise BenchError(f"no watch event for write {index} within "
                                 f"{EVENT_TIMEOUT}s") from None
            from_response.latencies.append(arrived - answered)
            from_send.latencies.append(arrived - sent)
            del waiting[index]
        from_response.elapsed = from_send.elapsed = clock() - started
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        await stream.close()


class AsyncStream(Protocol):
    """A watch stream yielding (arrival time, pod index) for each new object."""

    def events(self) -> AsyncIterator[tuple[float, int]]: ...

    async def close(self) -> None: ...


class HttpWatchStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def events(self) -> AsyncIterator[tuple[float, int]]:
        clock = time.perf_counter
        content = self.response.content
        while True:
            line = await content.readline()
            if not line:
                return
            arrived = clock()
            event = orjson.loads(line)
            if event.get("type") == "ADDED":
                name: str = event["object"]["metadata"]["name"]
                yield arrived, int(name.rsplit("-", 1)[1])

    async def close(self) -> None:
        self.response.close()


async def bench_apiserver(server: Apiserver, backend: str, cfg: Config,
                          other_pids: dict[str, int], etcd_endpoint: str = "",
                          ) -> tuple[list[Measurement], list[bytes]]:
    """Every phase against one apiserver; the measurements and the stored values of the
    sequentially created pods (for the raw etcd floor). `other_pids`: more processes whose
    CPU time to measure (etcd); `etcd_endpoint`: the etcd whose requests to count."""
    api = ApiClient(server, cfg.clients)
    phases = Phases(backend, cfg, CpuMeter({"apiserver": server.pid, **other_pids}),
                    etcd_counter=EtcdRequestCounter(etcd_endpoint) if etcd_endpoint else None,
                    profiled_pid=server.pid)
    measurement, phase = phases.new, phases.phase
    n = cfg.pods

    try:
        for namespace in (NS_WARMUP, NS_SEQUENTIAL, NS_CONCURRENT, NS_WATCH):
            await ensure_namespace(api, namespace)
        with progress(f"[{backend}] warm-up"):
            warmup = encoded_pods(NS_WARMUP, WARMUP_REQUESTS)
            for index, body in enumerate(warmup):
                await api.call("POST", pods_path(NS_WARMUP), body, expect=(201,))
                await api.call("GET", pods_path(NS_WARMUP, pod_name(index)))
            await api.call("GET", pods_path(NS_WARMUP))

        bodies = encoded_pods(NS_SEQUENTIAL, n)
        responses: list[bytes] = [b""] * n

        async def create_sequential(index: int) -> None:
            responses[index] = await api.call("POST", pods_path(NS_SEQUENTIAL), bodies[index],
                                              expect=(201,))

        with phase("create", f"{cfg.labels['create']} ({n} pods)"):
            await timed_sequence(n, create_sequential, measurement("create", note="POST"))

        concurrent_bodies = encoded_pods(NS_CONCURRENT, n)

        async def create_concurrent(index: int) -> None:
            await api.call("POST", pods_path(NS_CONCURRENT), concurrent_bodies[index],
                           expect=(201,))

        with phase("create_concurrent", f"{cfg.labels['create_concurrent']} ({n} pods)"):
            await timed_concurrently(n, cfg.clients, create_concurrent,
                                     measurement("create_concurrent", note="POST"))

        async def get(index: int) -> None:
            await api.call("GET", pods_path(NS_SEQUENTIAL, pod_name(index)))

        with phase("get", f"{cfg.labels['get']} ({n} pods)"):
            await timed_sequence(n, get, measurement("get", note="GET"))

        full_lists: list[bytes] = []

        async def list_all(_: int) -> None:
            full_lists.append(await api.call("GET", pods_path(NS_SEQUENTIAL)))

        with phase("list", f"{cfg.labels['list']} (x{cfg.list_repeats})"):
            m = measurement("list", note="GET")
            await timed_sequence(cfg.list_repeats, list_all, m)
        for body in full_lists:
            items = len(orjson.loads(body)["items"])
            if items != n:
                raise BenchError(f"a list of {NS_SEQUENTIAL} had {items} pods, not {n}")

        async def walk_pages(read_page: Callable[[bytes], dict[str, Any]]) -> list[dict[str, Any]]:
            token, pages = "", []
            while True:
                query = f"?limit={cfg.page_size}" + (f"&continue={token}" if token else "")
                pages.append(read_page(await api.call("GET", pods_path(NS_SEQUENTIAL) + query)))
                token = pages[-1]["metadata"].get("continue", "")
                if not token:
                    return pages

        expected_pages = math.ceil(n / cfg.page_size)
        checked = await walk_pages(orjson.loads)  # once, untimed, fully decoded
        items = sum(len(page["items"]) for page in checked)
        if items != n or len(checked) != expected_pages:
            raise BenchError(f"paged list of {NS_SEQUENTIAL} gave {items} pods in "
                             f"{len(checked)} pages, not {n} in {expected_pages}")

        async def list_pages(_: int) -> None:
            await walk_pages(list_metadata)

        with phase("list_pages", f"{cfg.labels['list_pages']} (x{cfg.list_repeats})"):
            m = measurement("list_pages", note=f"GET, {expected_pages} pages a walk")
            await timed_sequence(cfg.list_repeats, list_pages, m)

        watch_bodies = encoded_pods(NS_WATCH, n)

        async def open_watch() -> AsyncStream:
            listing = orjson.loads(await api.call("GET", pods_path(NS_WATCH) + "?limit=1"))
            revision = listing["metadata"]["resourceVersion"]
            response = await api.watch_session.get(
                api.base + pods_path(NS_WATCH) + f"?watch=true&resourceVersion={revision}")
            if response.status != 200:
                raise BenchError(f"watch: {response.status} {await response.read()!r}")
            return HttpWatchStream(response)

        async def create_watched(index: int) -> None:
            await api.call("POST", pods_path(NS_WATCH), watch_bodies[index], expect=(201,))

        with phase("watch", f"watch ({n} creates)"):
            await watch_latencies(open_watch, create_watched, n,
                                  measurement("watch", note="GET ?watch=true"),
                                  measurement("watch_send", note="POST + delivery"))
    finally:
        await api.close()
    return phases.results, [stored_value(body) for body in responses]


# --- raw etcd ------------------------------------------------------------------------------


class EtcdWatchStream:
    def __init__(self, call: grpc.aio.StreamStreamCall, prefix: bytes) -> None:
        self.call = call
        self.prefix = prefix

    async def events(self) -> AsyncIterator[tuple[float, int]]:
        clock = time.perf_counter
        while True:
            response = await self.call.read()
            if response is grpc.aio.EOF:
                return
            arrived = clock()
            for event in response.events:
                if event.type == rpc.Event.PUT:
                    name = event.kv.key[len(self.prefix):].decode()
                    yield arrived, int(name.rsplit("-", 1)[1])

    async def close(self) -> None:
        self.call.cancel()


async def bench_raw_etcd(endpoint: str, etcd_pid: int, values: Sequence[bytes], cfg: Config,
                         ) -> list[Measurement]:
    """The same phases straight on etcd with aetcd's gRPC stubs, the values the apiserver
    stored, under a prefix of this run's own."""
    channel = rpc.insecure_channel(grpc_target([endpoint]))
    kv = rpc.KVStub(channel)
    watch_stub = rpc.WatchStub(channel)
    run = f"/ephemera-bench/{int(time.time() * 1e6)}".encode()
    phases = Phases(RAW, cfg, CpuMeter({"etcd": etcd_pid}), EtcdRequestCounter(endpoint))
    measurement, phase = phases.new, phases.phase
    count = min(cfg.pods, len(values))

    def key(group: str, index: int) -> bytes:
        return b"%s/%s/%s" % (run, group.encode(), pod_name(index).encode())

    try:
        with progress(f"[{RAW}] warm-up"):
            for index in range(WARMUP_REQUESTS):
                await kv.Put(rpc.PutRequest(key=key("warmup", index), value=values[0]))
                await kv.Range(rpc.RangeRequest(key=key("warmup", index)))

        async def put(index: int) -> None:
            await kv.Put(rpc.PutRequest(key=key("seq", index), value=values[index]))

        with phase("create", f"{cfg.labels['create']} ({count} puts)"):
            await timed_sequence(count, put, measurement("create", note="Put"))

        async def put_concurrent(index: int) -> None:
            await kv.Put(rpc.PutRequest(key=key("conc", index), value=values[index]))

        with phase("create_concurrent", f"{cfg.labels['create_concurrent']} ({count} puts)"):
            await timed_concurrently(count, cfg.clients, put_concurrent,
                                     measurement("create_concurrent", note="Put"))

        async def get(index: int) -> None:
            response = await kv.Range(rpc.RangeRequest(key=key("seq", index)))
            if len(response.kvs) != 1:
                raise BenchError(f"raw get of {key('seq', index)!r} found nothing")

        with phase("get", f"{cfg.labels['get']} ({count} keys)"):
            await timed_sequence(count, get, measurement("get", note="Range of one key"))

        start = b"%s/seq/" % run
        end = bytes_prefix_end(start)

        async def range_all(_: int) -> None:
            response = await kv.Range(rpc.RangeRequest(key=start, range_end=end))
            if len(response.kvs) != count:
                raise BenchError(f"raw range found {len(response.kvs)} keys, not {count}")

        with phase("list", f"{cfg.labels['list']} (x{cfg.list_repeats})"):
            await timed_sequence(cfg.list_repeats, range_all,
                                 measurement("list", note="Range of the prefix"))

        async def range_pages(_: int) -> None:
            cursor, found = start, 0
            while True:
                response = await kv.Range(rpc.RangeRequest(key=cursor, range_end=end,
                                                           limit=cfg.page_size))
                found += len(response.kvs)
                if not response.more:
                    break
                cursor = response.kvs[-1].key + b"\0"
            if found != count:
                raise BenchError(f"raw paged range found {found} keys, not {count}")

        with phase("list_pages", f"{cfg.labels['list_pages']} (x{cfg.list_repeats})"):
            pages = math.ceil(count / cfg.page_size)
            m = measurement("list_pages", note=f"Range with limit, {pages} pages a walk")
            await timed_sequence(cfg.list_repeats, range_pages, m)

        watch_prefix = b"%s/watch/" % run

        async def open_watch() -> AsyncStream:
            call = watch_stub.Watch()
            await call.write(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                key=watch_prefix, range_end=bytes_prefix_end(watch_prefix), prev_kv=True)))
            created = await call.read()
            if created is grpc.aio.EOF or not created.created:
                raise BenchError(f"etcd did not create the watch: {created}")
            return EtcdWatchStream(call, watch_prefix)

        async def put_watched(index: int) -> None:
            await kv.Put(rpc.PutRequest(key=watch_prefix + pod_name(index).encode(),
                                        value=values[index]))

        with phase("watch", f"watch ({count} puts)"):
            await watch_latencies(open_watch, put_watched, count,
                                  measurement("watch", note="Watch stream"),
                                  measurement("watch_send", note="Put + delivery"))
        await kv.DeleteRange(rpc.DeleteRangeRequest(key=run + b"/",
                                                    range_end=bytes_prefix_end(run + b"/")))
    finally:
        await channel.close()
    return phases.results


# --- report --------------------------------------------------------------------------------


def find(results: Sequence[Measurement], phase: str, backend: str) -> Measurement | None:
    for m in results:
        if m.phase == phase and m.backend == backend:
            return m
    return None


def results_table(results: Sequence[Measurement], cfg: Config, backends: Sequence[str]) -> str:
    rows = []
    for key in PHASE_KEYS:
        for backend in backends:
            m = find(results, cfg.labels[key], backend)
            if m is None:
                continue
            rows.append([m.phase, backend, str(m.count), format_ms(m.median), format_ms(m.p99),
                         format_rate(m.throughput), m.note])
    return markdown_table(["phase", "backend", "n", "median ms", "p99 ms", "ops/s", "what"],
                          rows, align="llrrrrl")


CPU_PROCESSES = ("apiserver", "etcd", CLIENT)


def cpu_table(results: Sequence[Measurement], cfg: Config, backends: Sequence[str]) -> str:
    rows = []
    for key in PHASE_KEYS:
        if key == "watch_send":  # the same phase as "watch", the same CPU
            continue
        for backend in backends:
            m = find(results, cfg.labels[key], backend)
            if m is None:
                continue
            wall = m.elapsed / m.count if m.count else math.nan
            rows.append([m.phase.replace(", response → event", ""), backend, format_ms(wall),
                         *(format_ms(m.cpu_per_op(p)) for p in CPU_PROCESSES),
                         etcd_requests_per_op(m)])
    return markdown_table(["phase", "backend", "wall ms/op",
                           *(f"{p} CPU ms/op" for p in CPU_PROCESSES), "etcd requests/op"],
                          rows, align="llrrrrl")


def etcd_requests_per_op(m: Measurement) -> str:
    """`Range 3, Txn 1`: the etcd KV requests of the phase per operation, most first."""
    if not m.etcd_requests or not m.count:
        return "-"
    ranked = sorted(m.etcd_requests.items(), key=lambda item: -item[1])
    return ", ".join(f"{method} {count / m.count:.3g}" for method, count in ranked)


def time_ratios(slow: Measurement | None, fast: Measurement | None) -> list[float]:
    """[median ratio, p99 ratio, wall time per op ratio] of slow over fast."""
    if slow is None or fast is None:
        return [math.nan] * 3
    return [ratio(slow.median, fast.median), ratio(slow.p99, fast.p99),
            ratio(fast.throughput, slow.throughput)]


def ratio_rows(results: Sequence[Measurement], cfg: Config) -> list[tuple[str, list[float]]]:
    rows = []
    for key in PHASE_KEYS:
        phase = cfg.labels[key]
        etcd, raw, sqlite = (find(results, phase, b) for b in ("etcd", RAW, "sqlite"))
        rows.append((phase, time_ratios(etcd, raw) + time_ratios(sqlite, etcd)))
    return rows


RATIO_HEADERS = ["phase", "etcd ÷ raw: median", "p99", "wall/op",
                 "sqlite ÷ etcd: median", "p99", "wall/op"]
RATIO_KEYS = ["etcd_over_raw_median", "etcd_over_raw_p99", "etcd_over_raw_wall_per_op",
              "sqlite_over_etcd_median", "sqlite_over_etcd_p99", "sqlite_over_etcd_wall_per_op"]


def ratios_table(rows: Sequence[tuple[str, list[float]]]) -> str:
    return markdown_table(RATIO_HEADERS,
                          [[phase, *(format_number(v) for v in values)] for phase, values in rows])


def report(results: Sequence[Measurement], cfg: Config, machine: dict[str, str],
           command: str, started: datetime.datetime) -> str:
    backends = [b for b in (*cfg.stores, RAW) if any(m.backend == b for m in results)]
    lines = [
        f"# bench.api: {cfg.pods} pods, {cfg.clients} concurrent clients, "
        f"{cfg.list_repeats} lists, pages of {cfg.page_size}",
        "",
        f"Command: `{command}`  ",
        f"Started: {started.isoformat(timespec='seconds')}  ",
        *(f"{name.capitalize()}: {value}  " for name, value in machine.items()),
        "",
        "## Results",
        "",
        results_table(results, cfg, backends),
        "",
        "## Ratios",
        "",
        "Time ratios (above 1: the first is slower): of the median and p99 latencies, and of the"
        " wall time per operation (the inverse of throughput). etcd = the apiserver on the etcd"
        " store, raw = the same operations straight on etcd with aetcd.",
        "",
        ratios_table(ratio_rows(results, cfg)),
        "",
        "## CPU per operation",
        "",
        "CPU time (user + system, all threads) each process used during the phase, divided by"
        " its operations; wall = the phase's duration divided by its operations. The client is"
        " this benchmark (aiohttp for the apiserver, aetcd for raw etcd). etcd requests: the KV"
        " calls etcd handled during the phase (its grpc_server_handled_total), per operation.",
        "",
        cpu_table(results, cfg, backends),
    ]
    return "\n".join(lines) + "\n"


# --- main ----------------------------------------------------------------------------------


async def run_all(cfg: Config) -> list[Measurement]:
    results: list[Measurement] = []
    etcd_server: Any = None
    values: list[bytes] = []
    try:
        if "etcd" in cfg.stores:
            with progress("starting etcd"):
                etcd_server = start_etcd(cfg.work_dir / "etcd")
        for store in cfg.stores:
            endpoints = [etcd_server.endpoint] if store == "etcd" else []
            server = Apiserver(cfg.work_dir / f"apiserver-{store}", store, endpoints)
            with progress(f"[{store}] starting ephemera apiserver"):
                server.start()
            try:
                on_etcd = store == "etcd"
                measured, stored = await bench_apiserver(
                    server, store, cfg, {"etcd": etcd_server.process.pid} if on_etcd else {},
                    etcd_server.endpoint if on_etcd else "")
            except BaseException:
                log(f"apiserver log (tail):\n{server.log_tail()}")
                raise
            finally:
                server.stop()
            results += measured
            if store == "etcd":
                values = stored
        if etcd_server is not None and values:
            results += await bench_raw_etcd(etcd_server.endpoint, etcd_server.process.pid,
                                            values, cfg)
    finally:
        if etcd_server is not None:
            etcd_server.stop()
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.api", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=None, metavar="N",
                        help=f"pods per phase (default {DEFAULT_PODS}; {QUICK_PODS} with --quick)")
    parser.add_argument("--stores", default=",".join(STORES), metavar="LIST",
                        help="comma-separated stores to run the apiserver on "
                             "(default sqlite,etcd; etcd also runs the raw etcd floor)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run: {QUICK_PODS} pods, {QUICK_LIST_REPEATS} lists")
    parser.add_argument("--clients", type=int, default=DEFAULT_CLIENTS, metavar="C",
                        help=f"concurrent clients (default {DEFAULT_CLIENTS})")
    parser.add_argument("--page-size", type=int, default=DEFAULT_PAGE_SIZE, metavar="L",
                        help=f"limit of a paginated list (default {DEFAULT_PAGE_SIZE})")
    parser.add_argument("--list-repeats", type=int, default=None, metavar="R",
                        help=f"lists per list phase (default {DEFAULT_LIST_REPEATS}; "
                             f"{QUICK_LIST_REPEATS} with --quick)")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the data dirs go (default: a temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results as JSON there")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR", dest="profile",
                        help="sample the apiserver with py-spy during each phase: collapsed "
                             "stacks to DIR/<store>-<phase>.txt, top frames to .summary "
                             "(needs py-spy on PATH; the timings then include its pauses)")
    args = parser.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = [s for s in stores if s not in STORES]
    if not stores or unknown:
        parser.error(f"--stores: expected a list of {', '.join(STORES)}")
    args.stores = list(dict.fromkeys(stores))
    if args.pods is None:
        args.pods = QUICK_PODS if args.quick else DEFAULT_PODS
    if args.list_repeats is None:
        args.list_repeats = QUICK_LIST_REPEATS if args.quick else DEFAULT_LIST_REPEATS
    for name in ("pods", "clients", "page_size", "list_repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.api " + " ".join(sys.argv[1:] if argv is None else argv)
    temporary = args.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="ephemera-bench-")) if temporary else args.work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        args.profile = args.profile.resolve()
        args.profile.mkdir(parents=True, exist_ok=True)
    cfg = Config(pods=args.pods, clients=args.clients, page_size=args.page_size,
                 list_repeats=args.list_repeats, stores=args.stores,
                 work_dir=work_dir.resolve(), profile_dir=args.profile)
    started = datetime.datetime.now(datetime.UTC)
    machine = machine_description(cfg.work_dir)
    try:
        results = asyncio.run(run_all(cfg))
    except BenchError as error:
        log(f"bench.api: {error}")
        return 1
    finally:
        if temporary:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(report(results, cfg, machine, command.strip(), started), end="")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "command": command.strip(),
            "started": started.isoformat(timespec="seconds"),
            "config": {"pods": cfg.pods, "clients": cfg.clients, "page_size": cfg.page_size,
                       "list_repeats": cfg.list_repeats, "stores": cfg.stores},
            "machine": machine,
            "results": [m.as_dict() for m in results],
            "ratios": [{"phase": phase, **{k: None if math.isnan(v) else v
                                           for k, v in zip(RATIO_KEYS, values, strict=True)}}
                       for phase, values in ratio_rows(results, cfg)],
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
