"""The service environment variables (ephemera.kubelet.serviceenv) and how build_env places
them, checked against upstream's envvars_test.go and makeEnvironmentVariables."""

from __future__ import annotations

from typing import Any

from ephemera.kubelet.containerconfig import build_env
from ephemera.kubelet.serviceenv import service_env, service_variables


def svc(name: str, namespace: str, cluster_ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": cluster_ip, "ports": list(ports)}}


KUBERNETES = svc("kubernetes", "default", "10.96.0.1",
                 {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443})


def test_the_kubernetes_service_gives_upstreams_variables() -> None:
    assert service_variables(KUBERNETES) == [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
    ]


def test_names_dashes_several_ports_and_udp() -> None:
    got = dict(service_variables(svc("my-dns", "ns", "10.96.0.10",
                                     {"name": "dns-udp", "port": 53, "protocol": "UDP"},
                                     {"name": "metrics", "port": 9153})))
    assert got["MY_DNS_SERVICE_PORT"] == "53"
    assert got["MY_DNS_SERVICE_PORT_DNS_UDP"] == "53"
    assert got["MY_DNS_SERVICE_PORT_METRICS"] == "9153"
    assert got["MY_DNS_PORT"] == "udp://10.96.0.10:53"
    assert got["MY_DNS_PORT_53_UDP_PROTO"] == "udp"
    assert got["MY_DNS_PORT_9153_TCP"] == "tcp://10.96.0.10:9153"
    v6 = dict(service_variables(svc("v6", "ns", "fd00::1", {"port": 80})))
    assert v6["V6_PORT"] == "tcp://[fd00::1]:80"
    assert "V6_SERVICE_PORT_" not in "".join(v6)  # an unnamed port has no named variable


def test_which_services_a_pod_sees() -> None:
    services = [KUBERNETES,
                svc("web", "ns", "10.96.0.20", {"port": 80}),
                svc("other", "elsewhere", "10.96.0.30", {"port": 80}),
                svc("headless", "ns", "None", {"port": 80}),
                svc("external", "ns", "", {"port": 80})]
    with_links = service_env(services, "ns", True)
    assert with_links["WEB_SERVICE_HOST"] == "10.96.0.20"
    assert with_links["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert not any(k.startswith(("OTHER_", "HEADLESS_", "EXTERNAL_")) for k in with_links)
    assert list(with_links) == sorted(with_links)
    without = service_env(services, "ns", False)
    assert "WEB_SERVICE_HOST" not in without
    assert without["KUBERNETES_PORT"] == "tcp://10.96.0.1:443"  # always, as upstream
    # a `kubernetes` Service of the pod's own namespace wins when links are on
    own = service_env([KUBERNETES, svc("kubernetes", "ns", "10.96.0.40", {"port": 80})],
                      "ns", True)
    assert own["KUBERNETES_SERVICE_HOST"] == "10.96.0.40"


async def test_build_env_appends_them_after_the_pods_own_and_expands_them() -> None:
    async def none(namespace: str, name: str) -> None:
        return None

    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    container = {"name": "c", "env": [
        {"name": "KUBERNETES_SERVICE_PORT", "value": "mine"},
        {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
    ]}
    env = await build_env(pod, container, [("PATH", "/bin"), ("KUBERNETES_PORT", "image")],
                          get_configmap=none, get_secret=none, host_ip="198.18.0.5",
                          pod_ip="10.0.0.2", service_env=service_env([KUBERNETES], "ns", True))
    names = [name for name, _ in env]
    got = dict(env)
    assert names[:4] == ["PATH", "KUBERNETES_PORT", "KUBERNETES_SERVICE_PORT", "API"]
    assert got["KUBERNETES_SERVICE_PORT"] == "mine"  # the pod's own wins
    assert got["API"] == "https://10.96.0.1:mine"
    assert got["KUBERNETES_PORT"] == "tcp://10.96.0.1:443"  # over the image's
    assert got["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
