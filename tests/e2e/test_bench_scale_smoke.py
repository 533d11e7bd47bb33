"""The scale benchmark (`python -m bench.scale`) still runs end to end: a real apiserver on
SQLite, scheduler, controller-manager and one `ephemera hollow-nodes` process, with tiny
numbers; the report has every field for the store, every pod created and Running, every
process's memory, and nothing is left behind. It never checks a time. Its watches are the
kubelets' (`--watch-scope node`, one a node): the namespace-wide watch is the benchmark's
own follower of the pods, which every run has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster import run_bench

pytestmark = pytest.mark.e2e
NODES, PODS, CLIENTS, WATCHES = 2, 6, 2, 2


def test_tiny_scale_run_reports_every_measurement(tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    json_path = tmp_path / "scale.json"
    run = run_bench("bench.scale",
                    ["--quick", "--stores", "sqlite", "--nodes", str(NODES), "--pods", str(PODS),
                     "--clients", str(CLIENTS), "--watches", str(WATCHES), "--watch-scope",
                     "node", "--restart-check", "--idle-seconds", "1",
                     "--work-dir", str(work_dir), "--json", str(json_path)],
                    work_dir, timeout=240)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.left_behind == []
    document = json.loads(json_path.read_text())
    assert document["benchmark"] == "scale"
    [result] = document["results"]
    assert result["store"] == "sqlite"
    assert (result["nodes"], result["pods"], result["created"]) == (NODES, PODS, PODS)
    assert result["all_running_seconds"] is not None
    assert result["running_at_end"] == PODS  # followed through the benchmark's own watch
    # (a watch of all the namespace's pods)
    assert result["pods_per_second_end_to_end"] > 0
    assert result["creates"]["count"] == PODS and result["creates"]["errors"] == 0
    for reads in ("gets", "paginated_lists"):
        assert result[reads]["errors"] == 0
    assert result["list_all"]["items"] == PODS
    # One watch a node (WATCHES == NODES): together they saw each pod's ADDED event, at
    # least one on a node with half the pods or more, and none of a pod on another node.
    assert result["watch_scope"] == "node"
    assert result["watch_events_total"] >= PODS
    assert result["watch_events_max"] >= PODS // NODES
    assert result["watch_events_foreign"] == 0
    # the heartbeats while the pods started are reported (how late they were is a time, not
    # checked here; a run this short may see no second renewal of a Lease)
    assert isinstance(result["lease_renewal_gaps"]["count"], int)
    assert isinstance(result["nodes_marked_unknown"], int)
    assert set(result["rss_mib"]) == {"apiserver", "scheduler", "controller-manager",
                                      "hollow-nodes"}
    assert all(value > 0 for value in result["rss_mib"].values())
    assert set(result["cpu_seconds_until_running"]) == {*result["rss_mib"], "client"}
    shares = result["machine_cpu_until_running"]
    assert set(shares) == {"busy", "idle", "steal"}
    assert shares["busy"] > 0 and abs(sum(shares.values()) - 1) < 0.01
    # the quiet windows (--idle-seconds): each process's cores, and the apiserver's load
    for phase in ("nodes_only", "pods_running"):
        assert set(result[f"cpu_cores_{phase}"]) == set(result["cpu_seconds_until_running"])
        rates = result[f"requests_per_second_{phase}"]
        assert all(isinstance(rate, float) and " " in name for name, rate in rates.items())
    # the apiserver's own account of every client's requests: the creates, the bindings,
    # the nodes' status writes and Events at least
    latencies = result["apiserver_latencies"]
    assert latencies["mutating"]["count"] >= 3 * result["pods"]
    assert {"pods", "pods/binding", "pods/status", "events"} <= set(
        latencies["mutating_by_resource"])
    # every component killed and started again: nothing lost, the cache answers as the store
    restart = result["restart_check"]
    assert restart["running"] == PODS
    for resource, count in (("pods", PODS), ("nodes", NODES)):
        compared = restart["cache_vs_store"][resource]
        assert (compared["store"], compared["cache_list"], compared["watch"]) == (count,) * 3
        assert compared["differ"] == {"cache_list": 0, "watch": 0}
    assert "| sqlite |" in run.stdout
