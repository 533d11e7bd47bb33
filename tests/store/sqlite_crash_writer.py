"""A subprocess for the sqlite crash test: opens a sqlite store in the data dir given as
argv[1] and creates keys forever from several concurrent tasks (so writes are group-committed),
printing each key on stdout only after its create returned. The test kills it with SIGKILL."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ephemera.store import open_store

WRITERS = 8


async def main(data_dir: Path) -> None:
    store = open_store("sqlite", data_dir=data_dir)

    async def writer(number: int) -> None:
        i = 0
        while True:
            key = f"/crash/{number}/{i:08d}"
            await store.create(key, key.encode() * 20)
            sys.stdout.write(key + "\n")
            sys.stdout.flush()
            i += 1

    await asyncio.gather(*(writer(n) for n in range(WRITERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
