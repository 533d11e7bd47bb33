"""What one etcd write costs the client that sends it (`python -m bench.etcd_client`):
ephemera's etcd store talks gRPC (`grpc.aio`, etcd's `KV.Put`), and a Python gRPC call has
a fixed CPU cost of its own; etcd also serves the same API as JSON over HTTP (its gRPC
gateway, `POST /v3/kv/put`, keys and values in base64), which a client can send through
aiohttp, as ephemera's other clients send their requests. This measures both against one
real etcd (Debian's etcd-server, started for the run), side by side in one process run
after run, alternated: the client process's CPU per Put (every thread, gRPC's included)
and etcd's, with 1 and with `--concurrency` Puts in flight (an idle client against a busy
one, as the apiserver is under load), and prints the ratios, gateway over gRPC.

    python -m bench.etcd_client --puts 3000 --concurrency 16 --rounds 2 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import uvloop
from aetcd import rpc

from bench.common import (
    CLIENT,
    CpuMeter,
    format_number,
    log,
    machine_description,
    markdown_table,
    ratio,
    start_etcd,
)
from ephemera.store.etcd import grpc_target

VALUE = b"x" * 600  # about a Lease's size as stored
KEYS = 50
WARMUP = 200

Put = Callable[[int], Awaitable[None]]


async def _run_puts(put: Put, puts: int, concurrency: int) -> None:
    async def worker(first: int) -> None:
        for i in range(first, puts, concurrency):
            await put(i)

    await asyncio.gather(*(worker(first) for first in range(concurrency)))


def _key(i: int) -> bytes:
    return b"/bench/etcd-client/k%d" % (i % KEYS)


async def _grpc(endpoint: str, puts: int, concurrency: int, etcd_pid: int) -> dict[str, float]:
    channel = grpc.aio.insecure_channel(grpc_target([endpoint]))
    kv = rpc.KVStub(channel)

    async def put(i: int) -> None:
        await kv.Put(rpc.PutRequest(key=_key(i), value=VALUE))

    try:
        return await _measure(put, puts, concurrency, etcd_pid)
    finally:
        await channel.close()


async def _gateway(endpoint: str, puts: int, concurrency: int,
                   etcd_pid: int) -> dict[str, float]:
    url = f"{endpoint}/v3/kv/put"
    value = base64.b64encode(VALUE).decode()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def put(i: int) -> None:
            body = orjson.dumps({"key": base64.b64encode(_key(i)).decode(), "value": value})
            async with session.post(url, data=body) as response:
                answer = orjson.loads(await response.read())
                if response.status != 200 or "header" not in answer:
                    raise RuntimeError(f"etcd's gateway answered {response.status}: {answer}")

        return await _measure(put, puts, concurrency, etcd_pid)


async def _measure(put: Put, puts: int, concurrency: int, etcd_pid: int) -> dict[str, float]:
    await _run_puts(put, WARMUP, min(concurrency, WARMUP))
    meter = CpuMeter({"etcd": etcd_pid})
    before, wall = meter.snapshot(), time.perf_counter()
    await _run_puts(put, puts, concurrency)
    wall = time.perf_counter() - wall
    cpu = meter.since(before)
    return {"client_cpu_us": cpu[CLIENT] / puts * 1e6, "etcd_cpu_us": cpu["etcd"] / puts * 1e6,
            "wall_us": wall / puts * 1e6}


CLIENTS = {"grpc": _grpc, "gateway": _gateway}


async def run(args: argparse.Namespace, endpoint: str, etcd_pid: int) -> list[dict[str, Any]]:
    results = []
    for round_ in range(1, args.rounds + 1):
        for concurrency in (1, args.concurrency):
            order = list(CLIENTS) if round_ % 2 else list(reversed(CLIENTS))
            for name in order:
                measured = await CLIENTS[name](endpoint, args.puts, concurrency, etcd_pid)
                row = {"round": round_, "client": name, "concurrency": concurrency, **measured}
                log(f"round {round_}, {name}, {concurrency} in flight: "
                    f"client {measured['client_cpu_us']:.0f} us, "
                    f"etcd {measured['etcd_cpu_us']:.0f} us of CPU a Put")
                results.append(row)
    return results


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    for round_ in sorted({r["round"] for r in results}):
        for concurrency in sorted({r["concurrency"] for r in results}):
            pick = {r["client"]: r for r in results
                    if r["round"] == round_ and r["concurrency"] == concurrency}
            grpc_row, gateway = pick["grpc"], pick["gateway"]
            rows.append([
                str(round_), str(concurrency),
                format_number(grpc_row["client_cpu_us"], 0),
                format_number(gateway["client_cpu_us"], 0),
                format_number(ratio(gateway["client_cpu_us"], grpc_row["client_cpu_us"])),
                format_number(grpc_row["etcd_cpu_us"], 0),
                format_number(gateway["etcd_cpu_us"], 0),
                format_number(ratio(gateway["etcd_cpu_us"], grpc_row["etcd_cpu_us"])),
            ])
    return markdown_table(
        ["round", "in flight", "client us/Put, gRPC", "client, gateway", "gateway/gRPC",
         "etcd us/Put, gRPC", "etcd, gateway", "gateway/gRPC"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=3000, help="Puts a measure")
    parser.add_argument("--concurrency", type=int, default=16, help="Puts in flight (busy)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-etcd-client-") as scratch:
        work_dir = Path(scratch)
        server = start_etcd(work_dir)
        try:
            results = uvloop.run(run(args, server.endpoint, server.process.pid))
        finally:
            server.stop()
        report = {"benchmark": "etcd_client", "machine": machine_description(work_dir),
                  "puts": args.puts, "value_bytes": len(VALUE), "results": results}
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
