"""`ephemera.trace`: off unless `EPHEMERA_TRACE` names a file when the process starts; on, one
line per mark (time, pid, event, key) appended; and `bench.dynamic_swap` reading them back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("from ephemera import trace; trace.mark('a.b', 'GET /x'); "
        "print(trace.ENABLED, repr(trace.name_of({'metadata': {'name': 'p'}})))")


def run(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "EPHEMERA_TRACE"}
    done = subprocess.run([sys.executable, "-c", CODE], env={**clean, **env}, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def test_off_by_default_and_on_with_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "trace.log"
    assert run({}) == "False ''"  # off: no key is built either
    assert not path.exists()
    assert run({"EPHEMERA_TRACE": str(path)}) == "True 'p'"
    assert run({"EPHEMERA_TRACE": str(path)}) == "True 'p'"  # appended, not truncated
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    at, pid, event, key = lines[0].split(" ", 3)
    assert float(at) > 0 and int(pid) > 0
    assert (event, key) == ("a.b", "GET /x")


BENCH_CODE = """
import sys
from pathlib import Path
from bench.dynamic_swap import TraceReader, trace_marks
path = Path(sys.argv[1])
path.write_text("1.0 1 x.begin /pods/a\\n2.0 1 x.end /pods/b\\n3.0 1 x.end /pods/a\\n4.0 1 x.")
reader = TraceReader(path)
lines = reader.read()
assert lines == [(1.0, "x.begin", "/pods/a"), (2.0, "x.end", "/pods/b"),
                 (3.0, "x.end", "/pods/a")], lines
with path.open("a") as f:
    f.write("end /pods/a\\n")
assert reader.read() == [(4.0, "x.end", "/pods/a")]  # the partial line, once whole
spec = [("b", "x.begin", "/a", "sent"), ("e", "x.end", "/a", "b"),
        ("never", "x.other", "", "e"), ("orphan", "x.end", "", "missing")]
assert trace_marks(lines, {"sent": 0.5}, spec) == {"b": 1.0, "e": 3.0}
# a mark after a mark of the same event is that event's next line, even at the same time
same = [(1.0, "v.done", "a"), (1.0, "v.done", "a"), (2.0, "v.done", "a")]
spec = [("one", "v.done", "a", "sent"), ("two", "v.done", "a", "one"),
        ("three", "v.done", "a", "two"), ("four", "v.done", "a", "three")]
assert trace_marks(same, {"sent": 0.5}, spec) == {"one": 1.0, "two": 1.0, "three": 2.0}
"""


def test_the_bench_reads_new_lines_and_picks_each_mark_after_the_one_before(
        tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", BENCH_CODE, str(tmp_path / "t.log")], cwd=ROOT,
                   check=True)
