"""`ephemera dynamic` (and `kubectl dynamic`, the same command as a kubectl plugin): change a
running pod's volumes and containers through `pods/NAME/dynamic` (KEP-6395 and KEP-5972) and
show where each change stands.

- `add-volume POD (--emptydir NAME [--size-limit Q] [--medium Memory] | --configmap NAME |
  --secret NAME | --image REF | --projected NAME SOURCE...) [--name VOLUME]
  [--mount CONTAINER:PATH[:ro]]...`: every volume type a pod may add (KEP-6395). A projected
  volume's sources, in the order given (a later source's file replaces an earlier one's):
  `--project-secret NAME`, `--project-configmap NAME`, `--project-downward-api
  PATH=FIELDPATH` (a `fieldRef`, e.g. `labels=metadata.labels`) and `--project-token PATH`
  (a service account token; `--token-audience`, `--token-expiration-seconds`).
- `remove-volume POD NAME` (its mounts go with it)
- `add-container POD --name N --image I [--volume-mount VOLUME:PATH[:ro]]... [-- COMMAND...]`
- `remove-container POD NAME`
- `status POD`: desired (`pods/NAME`) against allocated (`pods/NAME/allocated`) against
  actuated (`status.containerStatuses[*].volumeMounts`, `status.volumeStatuses`), as tables.

A change reads the pod, edits a copy and PUTs the whole pod to `pods/NAME/dynamic` with the
resourceVersion just read (read again and retried on 409 Conflict); a container whose mounts
change keeps the `dynamicVolumePolicy.restartPolicy` it has, else gets `RestartContainer`;
`--live` sets `NotRequired` (the kubelet mounts into the running container, no restart;
feature gate DynamicVolumeHotPlug) and `--restart` sets `RestartContainer`. With `--wait`
the command waits until the change is actuated (changed containers running with exactly
their desired mounts, added volumes HostMounted, removed volumes pruned from
`volumeStatuses`, removed containers stopped) and prints how long that took after the
server accepted the change.

Errors print the server's Status message and each `details.causes` entry (`field: message`)
on stderr and exit 1. The kubeconfig is `--kubeconfig`, else `$KUBECONFIG`, else
`~/.kube/config`, as kubectl reads it; all HTTP goes through `ephemera.client`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.client import (
    ApiClient,
    ApiUnavailable,
    KubeconfigError,
    default_kubeconfig_path,
    load_kubeconfig,
    resource_path,
)
from ephemera.kubelet.allocation.manager import FAILED_ALLOCATION
from ephemera.kubelet.events import FAILED_MOUNT, SUCCESSFUL_ALLOCATION

Pod = dict[str, Any]
RESTART_CONTAINER = "RestartContainer"
NOT_REQUIRED = "NotRequired"  # live: mounted into the running container (DynamicVolumeHotPlug)
CONFLICT_RETRIES = 10
POLL_INTERVAL = 0.025
DEFAULT_WAIT_TIMEOUT = 120.0
SLOW_NOTICE_AFTER = 2.0


class CommandError(Exception):
    """A problem found before or after talking to the server, printed as `error: ...`."""


# --- argument parsing ------------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """Register `ephemera dynamic` on the `ephemera` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dynamic", help="add and remove a running pod's volumes and containers",
        description="Add and remove a running pod's volumes and containers "
                    "(pods/NAME/dynamic) and show desired, allocated and actuated state.")
    configure_parser(parser)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The options and actions of the command, on `parser` (also used by the kubectl
    plugin, whose top-level parser this is)."""
    # Accepted before the action and after it (where an action's own copy, without a
    # default, overrides the top level's only when given).
    _connection_options(parser, default=None)
    connection = ActionParser(add_help=False)
    _connection_options(connection, default=argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="dynamic_command", metavar="ACTION", required=True,
                                    parser_class=ActionParser)

    add_volume = actions.add_parser(
        "add-volume", parents=[connection], help="add a volume (and its mounts) to a pod",
        description="Add a volume to a running pod, mounted into the named containers "
                    "(restarted with the new mount, or with --live mounted into the "
                    "running containers without a restart).")
    add_volume.add_argument("pod", metavar="POD")
    source = add_volume.add_mutually_exclusive_group(required=True)
    source.add_argument("--emptydir", metavar="NAME", help="an emptyDir volume named NAME")
    source.add_argument("--configmap", metavar="NAME", help="a volume of ConfigMap NAME")
    source.add_argument("--secret", metavar="NAME", help="a volume of Secret NAME")
    source.add_argument("--image", metavar="REF", help="an image volume of image REF")
    source.add_argument("--projected", metavar="NAME",
                        help="a projected volume named NAME of the --project-* sources")
    add_volume.add_argument("--name", dest="volume_name", metavar="VOLUME",
                            help="the volume's name (default: the emptyDir or projected "
                                 "NAME, or the ConfigMap, Secret or image name made a DNS "
                                 "label)")
    add_volume.add_argument("--size-limit", metavar="QUANTITY",
                            help="emptyDir sizeLimit, e.g. 64Mi")
    add_volume.add_argument("--medium", choices=["Memory"], help="emptyDir medium")
    projected = add_volume.add_argument_group(
        "projected sources", "the sources of a --projected volume, in order (repeatable)")
    projected.add_argument("--project-secret", type=_projection("secret"), action="append",
                           dest="projections", metavar="NAME", help="the keys of Secret NAME")
    projected.add_argument("--project-configmap", type=_projection("configMap"),
                           action="append", dest="projections", metavar="NAME",
                           help="the keys of ConfigMap NAME")
    projected.add_argument("--project-downward-api", type=_projection("downwardAPI"),
                           action="append", dest="projections", metavar="PATH=FIELDPATH",
                           help="the file PATH holding the pod's field FIELDPATH "
                                "(e.g. labels=metadata.labels)")
    projected.add_argument("--project-token", type=_projection("serviceAccountToken"),
                           action="append", dest="projections", metavar="PATH",
                           help="the file PATH holding a token of the pod's service account")
    projected.add_argument("--token-audience", metavar="AUDIENCE",
                           help="the audience of the --project-token token (default: the "
                                "apiserver's)")
    projected.add_argument("--token-expiration-seconds", type=int, metavar="SECONDS",
                           help="the lifetime of the --project-token token (default 3600)")
    add_volume.add_argument("--mount", action="append", default=[], dest="mounts",
                            metavar="CONTAINER:PATH[:ro]",
                            help="mount the volume at PATH in CONTAINER, read-only with :ro "
                                 "(repeatable)")
    _policy_options(add_volume)
    _wait_options(add_volume)
    add_volume.set_defaults(func=run, change=_add_volume_change)

    remove_volume = actions.add_parser(
        "remove-volume", parents=[connection], help="remove a volume and its mounts",
        description="Remove a volume from a running pod; containers that mount it are "
                    "restarted without it (with --live: it is unmounted from the running "
                    "containers).")
    remove_volume.add_argument("pod", metavar="POD")
    remove_volume.add_argument("name", metavar="NAME", help="the volume's name")
    _policy_options(remove_volume)
    _wait_options(remove_volume)
    remove_volume.set_defaults(func=run, change=_remove_volume_change)

    add_container = actions.add_parser(
        "add-container", parents=[connection], help="add a container to a pod",
        description="Add a container to a running pod. Arguments after `--` are its command.",
        epilog="example: add-container POD --name side --image busybox --volume-mount "
               "cfg:/etc/cfg:ro --wait -- sh -c 'sleep 3600'")
    add_container.add_argument("pod", metavar="POD")
    add_container.add_argument("--name", dest="container_name", required=True, metavar="N")
    add_container.add_argument("--image", required=True, metavar="I")
    add_container.add_argument("--volume-mount", action="append", default=[],
                               dest="volume_mounts", metavar="VOLUME:PATH[:ro]",
                               help="mount an existing volume of the pod at PATH, read-only with "
                                    ":ro (repeatable)")
    add_container.command_after_dashes = True
    _wait_options(add_container)
    add_container.set_defaults(func=run, change=_add_container_change)

    remove_container = actions.add_parser(
        "remove-container", parents=[connection], help="remove a container from a pod",
        description="Remove a container from a running pod; it is stopped.")
    remove_container.add_argument("pod", metavar="POD")
    remove_container.add_argument("name", metavar="NAME", help="the container's name")
    _wait_options(remove_container)
    remove_container.set_defaults(func=run, change=_remove_container_change)

    status = actions.add_parser(
        "status", parents=[connection], help="desired vs allocated vs actuated state",
        description="Show a pod's volumes and containers as desired (pods/NAME), allocated "
                    "by the node (pods/NAME/allocated) and actuated (status).")
    status.add_argument("pod", metavar="POD")
    status.set_defaults(func=run, change=None)


class ActionParser(argparse.ArgumentParser):
    """An action's parser; with `command_after_dashes`, everything after the first `--` is
    the `command` (argparse alone cannot take options after a positional and a command)."""

    command_after_dashes = False

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        arguments = list(sys.argv[1:] if args is None else args)
        command: list[str] = []
        if self.command_after_dashes and "--" in arguments:
            cut = arguments.index("--")
            arguments, command = arguments[:cut], arguments[cut + 1:]
        parsed, rest = super().parse_known_args(arguments, namespace)
        if self.command_after_dashes:
            parsed.command = command
        return parsed, rest


def _connection_options(target: argparse.ArgumentParser, *, default: Any) -> None:
    target.add_argument("-n", "--namespace", default=default,
                        help="the pod's namespace (default: the context's, else default)")
    target.add_argument("--kubeconfig", default=default, metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    target.add_argument("--context", default=default, help="kubeconfig context to use")


def _policy_options(parser: argparse.ArgumentParser) -> None:
    policy = parser.add_mutually_exclusive_group()
    policy.add_argument("--live", dest="policy", action="store_const", const=NOT_REQUIRED,
                        help="change the mounts of the running containers without restarting "
                             "them (dynamicVolumePolicy.restartPolicy: NotRequired)")
    policy.add_argument("--restart", dest="policy", action="store_const",
                        const=RESTART_CONTAINER,
                        help="restart the containers with their new mounts "
                             "(restartPolicy: RestartContainer; the default unless the "
                             "container already says NotRequired)")


def _set_policy(container: dict[str, Any], wanted: str | None) -> None:
    """The container's dynamicVolumePolicy for a mount change: `wanted` when given, else the
    one it has, else RestartContainer."""
    current = (container.get("dynamicVolumePolicy") or {}).get("restartPolicy")
    container["dynamicVolumePolicy"] = {"restartPolicy": wanted or current or RESTART_CONTAINER}


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true",
                        help="wait until the change is actuated; print how long it took")
    parser.add_argument("--timeout", type=float, default=DEFAULT_WAIT_TIMEOUT, metavar="SECONDS",
                        help="how long --wait waits (default: %(default)s)")


# --- the changes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    owner: str  # a container (add-volume --mount) or a volume (add-container --volume-mount)
    path: str
    read_only: bool


MOUNT_OPTION = ("--mount", "CONTAINER:PATH[:ro]")  # add-volume: where the volume goes
VOLUME_MOUNT_OPTION = ("--volume-mount", "VOLUME:PATH[:ro]")  # add-container: what it mounts


def parse_mount(text: str, option: tuple[str, str] = MOUNT_OPTION) -> Mount:
    """`OWNER:PATH[:ro]`, as `option` (its flag and the metavar its help shows) takes it; an
    explicit `:rw` (read-write, the default) is taken too rather than read as part of PATH."""
    owner, sep, rest = text.partition(":")
    read_only = rest.endswith(":ro")
    if read_only or rest.endswith(":rw"):
        rest = rest[: -len(":ro")]
    if not sep or not owner or not rest:
        flag, metavar = option
        raise CommandError(f"invalid {flag} {go_quote(text)}: expected {metavar}")
    return Mount(owner, rest, read_only)


def _projection(kind: str) -> Callable[[str], tuple[str, str]]:
    """An argparse type: the source kind with its argument, checked where it can be."""

    def parse(text: str) -> tuple[str, str]:
        if kind == "downwardAPI":
            path, sep, field_path = text.partition("=")
            if not sep or not path or not field_path:
                raise argparse.ArgumentTypeError(
                    f"invalid value {go_quote(text)}: expected PATH=FIELDPATH")
        elif not text:
            raise argparse.ArgumentTypeError("must not be empty")
        return kind, text

    return parse


def _projected_source(args: argparse.Namespace) -> dict[str, Any]:
    sources: list[dict[str, Any]] = []
    tokens = 0
    for kind, value in args.projections or []:
        if kind == "secret":
            sources.append({"secret": {"name": value}})
        elif kind == "configMap":
            sources.append({"configMap": {"name": value}})
        elif kind == "downwardAPI":
            path, _, field_path = value.partition("=")
            sources.append({"downwardAPI": {"items": [
                {"path": path, "fieldRef": {"fieldPath": field_path}}]}})
        else:
            tokens += 1
            token: dict[str, Any] = {"path": value}
            if args.token_audience is not None:
                token["audience"] = args.token_audience
            if args.token_expiration_seconds is not None:
                token["expirationSeconds"] = args.token_expiration_seconds
            sources.append({"serviceAccountToken": token})
    if not sources:
        raise CommandError("--projected needs at least one source: --project-secret, "
                           "--project-configmap, --project-downward-api or --project-token")
    if tokens == 0 and (args.token_audience is not None or
                        args.token_expiration_seconds is not None):
        raise CommandError("--token-audience and --token-expiration-seconds apply only to "
                           "--project-token")
    return {"projected": {"sources": sources}}


def _dns_label(text: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return label or "volume"


def _volume_mount(name: str, mount: Mount) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "mountPath": mount.path}
    if mount.read_only:
        entry["readOnly"] = True
    return entry


def _find_container(pod: Pod, name: str) -> dict[str, Any]:
    for c in pod["spec"].get("containers") or []:
        if c.get("name") == name:
            assert isinstance(c, dict)
            return c
    raise CommandError(f'pod "{pod["metadata"]["name"]}" has no container "{name}"')


def _volume_source(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    if args.emptydir is not None:
        if args.projections or args.token_audience is not None or \
                args.token_expiration_seconds is not None:
            raise CommandError("--project-* and --token-* options apply only to --projected")
        empty_dir: dict[str, Any] = {}
        if args.medium:
            empty_dir["medium"] = args.medium
        if args.size_limit:
            empty_dir["sizeLimit"] = args.size_limit
        return args.volume_name or args.emptydir, {"emptyDir": empty_dir}
    if args.size_limit or args.medium:
        raise CommandError("--size-limit and --medium apply only to --emptydir")
    if args.projected is not None:
        return args.volume_name or args.projected, _projected_source(args)
    if args.projections or args.token_audience is not None or \
            args.token_expiration_seconds is not None:
        raise CommandError("--project-* and --token-* options apply only to --projected")
    if args.configmap is not None:
        return (args.volume_name or _dns_label(args.configmap),
                {"configMap": {"name": args.configmap}})
    if args.secret is not None:
        return (args.volume_name or _dns_label(args.secret),
                {"secret": {"secretName": args.secret}})
    ref: str = args.image
    image_name = ref.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return (args.volume_name or _dns_label(image_name),
            {"image": {"reference": ref, "pullPolicy": "IfNotPresent"}})


def _add_volume_change(args: argparse.Namespace) -> tuple[str, Callable[[Pod], None]]:
    name, source = _volume_source(args)
    mounts = [parse_mount(text) for text in args.mounts]

    def change(pod: Pod) -> None:
        pod["spec"].setdefault("volumes", []).append({"name": name, **source})
        for mount in mounts:
            target = _find_container(pod, mount.owner)
            target.setdefault("volumeMounts", []).append(_volume_mount(name, mount))
            _set_policy(target, args.policy)

    return f"volume {name} added", change


def _remove_volume_change(args: argparse.Namespace) -> tuple[str, Callable[[Pod], None]]:
    name: str = args.name

    def change(pod: Pod) -> None:
        volumes = pod["spec"].get("volumes") or []
        if not any(v.get("name") == name for v in volumes):
            raise CommandError(f'pod "{pod["metadata"]["name"]}" has no volume "{name}"')
        pod["spec"]["volumes"] = [v for v in volumes if v.get("name") != name]
        for target in pod["spec"].get("containers") or []:
            mounts = target.get("volumeMounts") or []
            kept = [m for m in mounts if m.get("name") != name]
            if len(kept) != len(mounts):
                target["volumeMounts"] = kept
                _set_policy(target, args.policy)

    return f"volume {name} removed", change


# Container names are unique across these lists of a pod spec.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _add_container_change(args: argparse.Namespace) -> tuple[str, Callable[[Pod], None]]:
    command = list(args.command)
    new: dict[str, Any] = {"name": args.container_name, "image": args.image}
    if command:
        new["command"] = command
    mounts = [parse_mount(text, VOLUME_MOUNT_OPTION) for text in args.volume_mounts]
    if mounts:
        new["volumeMounts"] = [_volume_mount(m.owner, m) for m in mounts]

    def change(pod: Pod) -> None:
        spec = pod["spec"]
        if any(c.get("name") == new["name"] for kind in CONTAINER_LISTS
               for c in spec.get(kind) or []):
            # Said here, not left to the server, whose answer to a second container of one
            # name includes the whole spec's diff against the first.
            raise CommandError(
                f'pod "{pod["metadata"]["name"]}" already has a container "{new["name"]}"')
        spec.setdefault("containers", []).append(copy.deepcopy(new))

    return f"container {args.container_name} added", change


def _remove_container_change(args: argparse.Namespace) -> tuple[str, Callable[[Pod], None]]:
    name: str = args.name

    def change(pod: Pod) -> None:
        _find_container(pod, name)
        pod["spec"]["containers"] = [c for c in pod["spec"]["containers"]
                                     if c.get("name") != name]

    return f"container {name} removed", change


# --- running -----------------------------------------------------------------------------------


def _print_warning(text: str) -> None:
    """A `Warning` from the apiserver, printed as kubectl prints it."""
    print(f"Warning: {text}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run the parsed action; the exit code."""
    try:
        return asyncio.run(_run(args))
    except StatusError as err:
        print_status_error(err)
    except CommandError as err:
        print(f"error: {err}", file=sys.stderr)
    except KubeconfigError as err:
        print(f"error: {err}", file=sys.stderr)
    except ApiUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


def print_status_error(err: StatusError) -> None:
    """The server's message, then each cause as `field: message`, on stderr."""
    print(f"Error from server ({err.reason or err.code}): {err.message}", file=sys.stderr)
    for cause in (err.details or {}).get("causes") or []:
        field, message = cause.get("field", ""), cause.get("message", "")
        print(f"  {field}: {message}" if field else f"  {message}", file=sys.stderr)


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (`context` or current-context), as kubectl
    takes it when no `-n` is given; `default` when it names none."""
    path = Path(kubeconfig) if kubeconfig else default_kubeconfig_path()
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        name = context or doc.get("current-context")
        for entry in doc.get("contexts") or []:
            if entry.get("name") == name:
                return str((entry.get("context") or {}).get("namespace") or "default")
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    return "default"


async def _run(args: argparse.Namespace) -> int:
    # The arguments first: a bad one is reported without reading the kubeconfig.
    description, change = args.change(args) if args.change is not None else ("", None)
    config = load_kubeconfig(getattr(args, "kubeconfig", None), getattr(args, "context", None))
    namespace = getattr(args, "namespace", None) or \
        context_namespace(getattr(args, "kubeconfig", None), getattr(args, "context", None))
    pod_path = resource_path("pods", namespace, args.pod)
    async with ApiClient(config, user_agent="ephemera-dynamic",
                         on_warning=_print_warning) as api:
        if change is None:
            print(await status_text(api, pod_path), end="")
            return 0
        before, after = await put_dynamic(api, pod_path, change)
        accepted = time.monotonic()
        print(f"pod/{args.pod}: {description}")
        if args.wait:
            await wait_actuated(api, pod_path, before, after, args.timeout)
            print(f"pod/{args.pod}: actuated in {time.monotonic() - accepted:.3f}s")
    return 0


async def put_dynamic(api: ApiClient, pod_path: str,
                      change: Callable[[Pod], None]) -> tuple[Pod, Pod]:
    """Read the pod, apply `change` to a copy and PUT it to `pods/NAME/dynamic` with the
    resourceVersion just read; again on 409 Conflict. The pod before and as the server
    answered."""
    for attempt in range(CONFLICT_RETRIES):
        before = await api.get(pod_path)
        desired = copy.deepcopy(before)
        change(desired)
        try:
            after = await api.update(f"{pod_path}/dynamic", desired)
        except StatusError as err:
            if err.code == 409 and attempt + 1 < CONFLICT_RETRIES:
                continue
            raise
        return before, after
    raise AssertionError("unreachable")


# --- waiting for actuation ---------------------------------------------------------------------


def _mount_set(mounts: Sequence[dict[str, Any]] | None) -> set[tuple[str, str, bool]]:
    """Mounts as (volume, path, read-only), alike for spec and status entries."""
    return {(str(m.get("name")), str(m.get("mountPath")), bool(m.get("readOnly")))
            for m in mounts or []}


def _statuses(pod: Pod) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in pod.get("status", {}).get("containerStatuses") or []}


def _volume_phases(pod: Pod) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod.get("status", {}).get("volumeStatuses") or []}


def unmounted_volumes(before: Pod, desired: Pod) -> set[str]:
    """The volumes the change adds that no container of `desired` mounts: the kubelet, as
    upstream's, never sets those up on the host, so they get no `volumeStatuses` entry and
    are done once the node has allocated them."""
    added = ({v["name"] for v in desired["spec"].get("volumes") or []} -
             {v["name"] for v in before["spec"].get("volumes") or []})
    spec = desired["spec"]
    mounted = {str(m.get("name")) for c in [*(spec.get("containers") or []),
                                            *(spec.get("initContainers") or [])]
               for m in c.get("volumeMounts") or []}
    return added - mounted


def pending_work(before: Pod, desired: Pod, now: Pod,
                 allocated: set[str] | None = None) -> list[str]:
    """What of the change from `before` to `desired` is not yet actuated in `now` (empty:
    done); `allocated`: the volumes the node has allocated, when asked (`unmounted_volumes`
    are waited for there). Raises CommandError when a volume failed to mount."""
    waiting: list[str] = []
    old_containers = {c["name"]: c for c in before["spec"].get("containers") or []}
    new_containers = {c["name"]: c for c in desired["spec"].get("containers") or []}
    old_volumes = {v["name"] for v in before["spec"].get("volumes") or []}
    new_volumes = {v["name"] for v in desired["spec"].get("volumes") or []}
    statuses = _statuses(now)
    phases = _volume_phases(now)
    unmounted = unmounted_volumes(before, desired)
    for name in sorted(unmounted):
        if allocated is None or name not in allocated:
            waiting.append(f"volume {name} is not yet allocated")
    for name in sorted(new_volumes - old_volumes - unmounted):
        entry = phases.get(name)
        phase = entry.get("hostPhase") if entry else None
        if phase == "ErrorMounting":  # allocated; the node retries it (a missing Secret...)
            raise CommandError(f"volume {name} failed to mount (the node retries it): "
                               f"{entry.get('errorMessage', '') if entry else ''}")
        if phase != "HostMounted":
            waiting.append(f"volume {name} is {phase or 'not yet reported'}")
    for name in sorted(old_volumes - new_volumes):
        if name in phases:
            waiting.append(f"volume {name} is {phases[name].get('hostPhase')}")
    for name, spec in new_containers.items():
        old = old_containers.get(name)
        if old is not None and _mount_set(old.get("volumeMounts")) == \
                _mount_set(spec.get("volumeMounts")):
            continue  # not changed by this command
        status = statuses.get(name, {})
        state = status.get("state", {})
        if "running" not in state:
            reason = (state.get("waiting") or {}).get("reason") or "not running"
            waiting.append(f"container {name} is {reason}")
            continue
        # Only this change's mounts count: an earlier live mount the node keeps retrying
        # (a FailedMount) does not hold up a later, unrelated change.
        wanted = _mount_set(spec.get("volumeMounts"))
        had = _mount_set((old or {}).get("volumeMounts"))
        actual = _mount_set(status.get("volumeMounts"))
        if (wanted - had) - actual or (had - wanted) & actual:
            waiting.append(f"container {name} not yet running with its new mounts")
    for name in sorted(set(old_containers) - set(new_containers)):
        if "running" in statuses.get(name, {}).get("state", {}):
            waiting.append(f"container {name} still running")
    return waiting


async def wait_actuated(api: ApiClient, pod_path: str, before: Pod, desired: Pod,
                        timeout: float) -> None:
    """Poll the pod until `pending_work` is empty; CommandError after `timeout` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    reported: set[str] = set()
    unmounted = unmounted_volumes(before, desired)
    while True:
        now = await api.get(pod_path)
        allocated = await _allocated_volumes(api, pod_path, now) if unmounted else None
        waiting = pending_work(before, desired, now, allocated)
        if not waiting:
            return
        # Say once what is holding the change up when it takes longer than a moment (a
        # change the node cannot allocate yet shows Unallocated / Pending here).
        slow = time.monotonic() - started > SLOW_NOTICE_AFTER
        for item in waiting:
            if item not in reported and slow:
                print(f"waiting: {item}", file=sys.stderr)
                reported.add(item)
        if time.monotonic() > deadline:
            why = await _allocation_failure(api, pod_path, now, desired)
            failed = "" if why else await _mount_failure(api, now, before, desired)
            raise CommandError(f"not actuated within {timeout:g}s: " + "; ".join(waiting) +
                               (f"\nthe node has not allocated it: {why}" if why else "") +
                               (f"\nthe node cannot mount it: {failed}" if failed else ""))
        await asyncio.sleep(POLL_INTERVAL)


async def _allocated_volumes(api: ApiClient, pod_path: str, pod: Pod) -> set[str]:
    """The volumes the node has allocated to the pod (`/allocated`); from the pod's events
    where the node has no kubelet API (simulated nodes): the spec's volumes unless its
    latest FailedAllocation is newer than its latest SuccessfulAllocation."""
    try:
        allocated = await api.get(f"{pod_path}/allocated")
    except StatusError:
        if _standing_failure(await _pod_events(api, pod)) is not None:
            return set()
        allocated = pod
    return set(_spec_names(allocated)[0])


def _standing_failure(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod's latest FailedAllocation when it is the node's latest word (no
    SuccessfulAllocation after it): how a node without a kubelet API is judged."""
    failed = _latest(events, FAILED_ALLOCATION)
    succeeded = _latest(events, SUCCESSFUL_ALLOCATION)
    if failed is None or (succeeded is not None and _when(succeeded) > _when(failed)):
        return None
    return failed


def _spec_names(pod: Pod) -> tuple[list[str], list[str]]:
    spec = pod.get("spec") or {}
    return ([v["name"] for v in spec.get("volumes") or []],
            [c["name"] for c in spec.get("containers") or []])


async def _allocation_failure(api: ApiClient, pod_path: str, pod: Pod, desired: Pod) -> str:
    """When the node has not allocated the `desired` volumes and containers: why, from the
    pod's latest FailedAllocation event ("" when allocated or no reason is known). A node
    whose kubelet API cannot be reached (simulated nodes have none) is judged by its events
    alone: a FailedAllocation no older than the latest SuccessfulAllocation."""
    try:
        allocated = await api.get(f"{pod_path}/allocated")
    except StatusError:
        failed = _standing_failure(await _pod_events(api, pod))
        return "" if failed is None else str(failed.get("message", ""))
    if _spec_names(allocated) == _spec_names(desired):
        return ""
    return _message(_latest(await _pod_events(api, pod), FAILED_ALLOCATION))


async def _mount_failure(api: ApiClient, pod: Pod, before: Pod, desired: Pod) -> str:
    """The latest FailedMount event of the pod naming a volume this change mounts (a live
    mount the kubelet keeps retrying: the path is a file, a symlink out of the root...); ""
    when there is none."""
    added = set()
    old = {c["name"]: c for c in before["spec"].get("containers") or []}
    for container in desired["spec"].get("containers") or []:
        previous = old.get(container["name"], {}).get("volumeMounts")
        added |= {m[0] for m in _mount_set(container.get("volumeMounts")) -
                  _mount_set(previous)}
    return _message(_latest(await _pod_events(api, pod), FAILED_MOUNT, lambda message: any(
        f'volume "{name}"' in message for name in added)))


async def _pod_events(api: ApiClient, pod: Pod) -> list[dict[str, Any]]:
    """The pod's events (none when they cannot be read)."""
    meta = pod["metadata"]
    try:
        events = await api.list(resource_path("events", meta["namespace"]),
                                field_selector=f"involvedObject.uid={meta['uid']}")
    except StatusError:
        return []
    return list(events["items"])


def _latest(events: list[dict[str, Any]], reason: str,
            about: Callable[[str], bool] = lambda message: True) -> dict[str, Any] | None:
    """The latest of `events` with `reason` whose message is `about` what is asked."""
    found = [e for e in events
             if e.get("reason") == reason and about(str(e.get("message", "")))]
    found.sort(key=_when)
    return found[-1] if found else None


def _message(event: dict[str, Any] | None) -> str:
    return str(event.get("message", "")) if event is not None else ""


def _when(event: dict[str, Any]) -> str:
    """When an event last happened, as a string that sorts in time order (RFC 3339)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


# --- status ------------------------------------------------------------------------------------


def _volume_type(volume: dict[str, Any] | None) -> str:
    if not volume:
        return "-"
    for key, value in volume.items():
        if key == "name":
            continue
        if key == "emptyDir":
            medium = (value or {}).get("medium")
            return f"emptyDir({medium})" if medium else "emptyDir"
        if key == "configMap":
            return f"configMap/{value.get('name', '')}"
        if key == "secret":
            return f"secret/{value.get('secretName', '')}"
        if key == "image":
            return f"image/{value.get('reference', '')}"
        if key == "projected":
            return "projected(" + ",".join(_projection_text(source) for source in
                                           (value or {}).get("sources") or []) + ")"
        return key
    return "-"


def _projection_text(source: dict[str, Any]) -> str:
    for kind, value in source.items():
        if kind == "secret":
            return f"secret/{(value or {}).get('name', '')}"
        if kind == "configMap":
            return f"configMap/{(value or {}).get('name', '')}"
        return str(kind)
    return "-"


def _mounts_text(mounts: Sequence[dict[str, Any]] | None) -> str:
    if mounts is None:
        return "-"
    parts = [f"{m.get('name')}:{m.get('mountPath')}" + (":ro" if m.get("readOnly") else "")
             for m in mounts]
    return ",".join(parts) or "<none>"


def _state_text(status: dict[str, Any] | None) -> str:
    if not status:
        return "-"
    state = status.get("state") or {}
    for key in ("running", "waiting", "terminated"):
        if key in state:
            reason = (state[key] or {}).get("reason")
            return f"{key.capitalize()}({reason})" if reason else key.capitalize()
    return "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl-style columns: left aligned, three spaces apart."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["   ".join(str(cell).ljust(width)
                        for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines) + "\n"


async def status_text(api: ApiClient, pod_path: str) -> str:
    """The `status` tables: volumes, then containers."""
    pod = await api.get(pod_path)
    allocated: Pod | None
    allocated_note = ""
    try:
        allocated = await api.get(f"{pod_path}/allocated")
    except StatusError as err:
        allocated, allocated_note = None, f"allocated: unavailable ({err.message})\n"
    desired_volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    allocated_volumes = {v["name"]: v for v in (allocated or {}).get("spec", {})
                         .get("volumes") or []}
    phases = _volume_phases(pod)
    volume_names = list(desired_volumes) + [n for n in [*allocated_volumes, *phases]
                                            if n not in desired_volumes]
    volume_names = list(dict.fromkeys(volume_names))
    volume_rows = []
    for name in volume_names:
        entry = phases.get(name, {})
        volume_rows.append([
            name, _volume_type(desired_volumes.get(name) or allocated_volumes.get(name)),
            "yes" if name in desired_volumes else "no",
            ("yes" if name in allocated_volumes else "no") if allocated is not None else "?",
            entry.get("hostPhase", "-"), entry.get("errorMessage", "")])
    desired_containers = {c["name"]: c for c in pod["spec"].get("containers") or []}
    allocated_containers = {c["name"]: c for c in (allocated or {}).get("spec", {})
                            .get("containers") or []}
    statuses = _statuses(pod)
    container_names = list(dict.fromkeys([*desired_containers, *allocated_containers,
                                          *statuses]))
    container_rows = []
    for name in container_names:
        status = statuses.get(name)
        desired = desired_containers.get(name)
        alloc = allocated_containers.get(name)
        container_id = str((status or {}).get("containerID") or "-")
        container_rows.append([
            name, _mounts_text(desired.get("volumeMounts") or [] if desired else None),
            _mounts_text(alloc.get("volumeMounts") or [] if alloc else None)
            if allocated is not None else "?",
            _mounts_text((status or {}).get("volumeMounts") or []
                         if status and "running" in (status.get("state") or {}) else None),
            _state_text(status), container_id.split("://")[-1][:13]])
    meta = pod["metadata"]
    out = [f"Pod: {meta.get('namespace')}/{meta['name']}   Node: "
           f"{pod['spec'].get('nodeName') or '<none>'}   Phase: "
           f"{pod.get('status', {}).get('phase', '-')}\n", allocated_note, "\n"]
    out.append(table(["VOLUME", "TYPE", "DESIRED", "ALLOCATED", "HOST PHASE", "MESSAGE"],
                     volume_rows))
    out.append("\n")
    out.append(table(["CONTAINER", "DESIRED MOUNTS", "ALLOCATED MOUNTS", "ACTUATED MOUNTS",
                      "STATE", "CONTAINER ID"], container_rows))
    if allocated is not None and _spec_names(allocated) != _spec_names(pod):
        why = await _allocation_failure(api, pod_path, pod, pod)
        if why:  # the node refused (or defers) the change: say why, as `--wait` does
            out.append(f"\nthe node has not allocated it: {why}\n")
    return "".join(out)
