"""`compute_pod_actions` (kuberuntime's computePodActions): what one sync does to a pod's
containers, from its allocated spec and its instances in the runtime, without a runtime."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ephemera.kubelet.podactions import (
    ClearWaiting,
    KillForProbe,
    RestartForChange,
    StartContainer,
    WaitForVolumes,
    all_done,
    compute_pod_actions,
)
from ephemera.kubelet.runtime.base import ContainerState, ContainerStatus, Mount


def _pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
         restart_policy: str = "Always") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": restart_policy, "containers": containers,
                     "initContainers": init or []}}


def _instance(name: str, state: ContainerState, exit_code: int = 0,
              mounts: tuple[Mount, ...] = ()) -> ContainerStatus:
    # created from the spec's image (the specs here name none): not a changed definition
    return ContainerStatus(id=f"id-{name}", sandbox_id="s", name=name, attempt=0, image="",
                           image_id="sha256:x", state=state, created_at=1.0,
                           exit_code=exit_code, mounts=mounts)


def _ready(_: Mapping[str, Any]) -> bool:
    return True


def test_init_containers_run_one_at_a_time_before_the_main_ones() -> None:
    pod = _pod([{"name": "main"}], init=[{"name": "i1"}, {"name": "i2"}])
    first = compute_pod_actions(pod, {}, _ready)
    assert first.actions == [StartContainer(pod["spec"]["initContainers"][0], None, True)]
    assert not first.init_done
    running = compute_pod_actions(pod, {"i1": [_instance("i1", ContainerState.RUNNING)]},
                                  _ready)
    assert running.actions == [] and not running.init_done
    done = {"i1": [_instance("i1", ContainerState.EXITED)],
            "i2": [_instance("i2", ContainerState.EXITED)]}
    main = compute_pod_actions(pod, done, _ready)
    assert main.init_done
    assert main.actions == [StartContainer(pod["spec"]["containers"][0], None, False)]


def test_a_failed_init_container_under_never_fails_the_pod() -> None:
    pod = _pod([{"name": "main"}], init=[{"name": "i1"}], restart_policy="Never")
    failed = {"i1": [_instance("i1", ContainerState.EXITED, exit_code=1)]}
    result = compute_pod_actions(pod, failed, _ready)
    assert result.init_failed and not result.init_done and result.actions == []
    restarted = compute_pod_actions(_pod([{"name": "main"}], init=[{"name": "i1"}],
                                         restart_policy="OnFailure"), failed, _ready)
    assert not restarted.init_failed
    assert [type(a) for a in restarted.actions] == [StartContainer]


def test_a_running_sidecar_lets_the_next_init_container_start() -> None:
    pod = _pod([{"name": "main"}], init=[{"name": "side", "restartPolicy": "Always"},
                                         {"name": "i2"}])
    result = compute_pod_actions(pod, {"side": [_instance("side", ContainerState.RUNNING)]},
                                 _ready)
    assert result.actions == [StartContainer(pod["spec"]["initContainers"][1], None, True)]


def test_restart_policy_decides_for_exited_main_containers() -> None:
    exited = {"c": [_instance("c", ContainerState.EXITED, exit_code=0)]}
    for policy, restarts in (("Always", True), ("OnFailure", False), ("Never", False)):
        pod = _pod([{"name": "c"}], restart_policy=policy)
        result = compute_pod_actions(pod, exited, _ready)
        kinds = [type(a) for a in result.actions]
        assert kinds == ([StartContainer] if restarts else [ClearWaiting]), policy
        assert all_done(pod, exited) is (not restarts)


def test_a_container_waiting_for_its_dynamic_volumes_waits_alone() -> None:
    pod = _pod([{"name": "a", "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
                {"name": "b"}, {"name": "new", "volumeMounts": [{"name": "v",
                                                                 "mountPath": "/v"}]}])
    instances = {"a": [_instance("a", ContainerState.EXITED, exit_code=1)],
                 "b": [_instance("b", ContainerState.RUNNING)]}

    def ready(container: Mapping[str, Any]) -> bool:
        return not container.get("volumeMounts")

    result = compute_pod_actions(pod, instances, ready)
    # `a` waits (ContainerCreating), `b` runs, `new` is not started until its volume is up.
    assert result.actions == [WaitForVolumes("a"), ClearWaiting("b")]


def test_changed_mounts_restart_only_with_restart_container_policy() -> None:
    mounts = (Mount(container_path="/old", host_path="/h", volume_name="old"),)
    running = {"c": [_instance("c", ContainerState.RUNNING, mounts=mounts)]}
    spec = {"name": "c", "volumeMounts": [{"name": "new", "mountPath": "/new"}]}
    kept = compute_pod_actions(_pod([spec]), running, _ready)
    assert kept.actions == [ClearWaiting("c")]
    restart = {**spec, "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"}}
    changed = compute_pod_actions(_pod([restart]), running, _ready)
    assert changed.actions == [RestartForChange(restart, running["c"][0])]


def test_a_container_that_failed_its_liveness_probe_is_killed_and_restarted() -> None:
    failed: dict[str, tuple[str, float | None]] = {"id-main": ("liveness", None),
                                                   "id-side": ("startup", 5.0)}

    def failed_probe(name: str, container_id: str) -> tuple[str, float | None] | None:
        return failed.get(container_id)

    side = {"name": "side", "restartPolicy": "Always"}
    pod = _pod([{"name": "main"}, {"name": "other"}], init=[side])
    running = {name: [_instance(name, ContainerState.RUNNING)]
               for name in ("side", "main", "other")}
    # The sidecar first: killed and restarted, the main containers wait for the next sync.
    result = compute_pod_actions(pod, running, _ready, failed_probe)
    assert result.actions == [KillForProbe(side, running["side"][0], True,
                                           "Init container side failed startup probe", 5.0,
                                           True)]
    assert not result.init_done
    del failed["id-side"]
    result = compute_pod_actions(pod, running, _ready, failed_probe)
    assert result.actions == [
        KillForProbe(pod["spec"]["containers"][0], running["main"][0], False,
                     "Container main failed liveness probe, will be restarted", None, True),
        ClearWaiting("other")]
    # Under `Never` the container is killed and stays down.
    never = _pod([{"name": "main"}], restart_policy="Never")
    result = compute_pod_actions(never, {"main": running["main"]}, _ready, failed_probe)
    assert result.actions == [KillForProbe(never["spec"]["containers"][0], running["main"][0],
                                           False, "Container main failed liveness probe",
                                           None, False)]


def test_the_containers_after_a_sidecar_wait_for_its_startup_probe() -> None:
    side = {"name": "side", "restartPolicy": "Always", "startupProbe": {}}
    pod = _pod([{"name": "main"}], init=[side])
    running = {"side": [_instance("side", ContainerState.RUNNING)]}
    waiting = compute_pod_actions(pod, running, _ready, started=lambda name, cid: False)
    assert waiting.actions == [] and not waiting.init_done
    going = compute_pod_actions(pod, running, _ready, started=lambda name, cid: True)
    assert going.init_done
    assert going.actions == [StartContainer(pod["spec"]["containers"][0], None, False)]


def test_a_running_container_with_another_image_is_restarted() -> None:
    """upstream's containerChanged: the image is the one change that restarts a running
    container, whatever the restart policy."""
    changed = {"name": "main", "image": "busybox:v2"}
    running = {"main": [_instance("main", ContainerState.RUNNING)]}
    result = compute_pod_actions(_pod([changed], restart_policy="Never"), running, _ready)
    assert result.actions == [RestartForChange(changed, running["main"][0])]
    same = compute_pod_actions(_pod([{"name": "main", "image": ""}]), running, _ready)
    assert same.actions == [ClearWaiting("main")]
