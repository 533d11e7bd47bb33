"""networking.k8s.io/v1 Ingress: upstream's validation (`ValidateIngressCreate`,
`ValidateIngressUpdate`, `ValidateIngressStatusUpdate` in `pkg/apis/networking/validation`)
with its messages and paths, and the warnings of its REST strategy.

ephemera stores and serves Ingresses but runs no ingress controller, so nothing routes their
traffic or writes their status: the apiserver says so in a `Warning` on create (`WARNING`),
as it does for the deprecated class annotation. Pure."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta, services
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import GoText

WARNING = ("ephemera runs no ingress controller (not implemented): this Ingress routes no "
           "traffic")
CLASS_ANNOTATION = "kubernetes.io/ingress.class"
CLASS_ANNOTATION_WARNING = (f'annotation "{CLASS_ANNOTATION}" is deprecated, please use '
                            "'spec.ingressClassName' instead")
PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]  # sorted, as upstream lists them
_INVALID_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_SUFFIXES = ("/..", "/.")
_WILDCARD_FMT = r"\*\." + meta.DNS1123_SUBDOMAIN_FMT
_WILDCARD_RE = re.compile(f"^{_WILDCARD_FMT}$")
_WILDCARD_MSG = ("a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS "
                 "subdomain, which must consist of lower case alphanumeric characters, '-' or "
                 "'.' and end with an alphanumeric character")
_IP_ERROR = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
_SPEC = Path("spec")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _wildcard_errors(host: str) -> list[str]:
    """`IsWildcardDNS1123Subdomain`."""
    errs = []
    if len(host) > meta.DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {meta.DNS1123_SUBDOMAIN_MAX} characters")
    if not _WILDCARD_RE.match(host):
        errs.append(meta.regex_error(_WILDCARD_MSG, _WILDCARD_FMT, "*.example.com"))
    return errs


def _host_errors(host: str) -> list[str]:
    return _wildcard_errors(host) if "*" in host else meta.dns1123_subdomain_errors(host)


# --- spec -----------------------------------------------------------------------------------


def validate_ingress_create(obj: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateIngressCreate` past the object metadata: the spec, and the class annotation
    agreeing with `ingressClassName`."""
    errs = _spec_errors(_d(obj.get("spec")), allow_invalid_secret=False,
                        allow_invalid_wildcard_rule=False)
    annotations = _d(_d(obj.get("metadata")).get("annotations"))
    class_name = _d(obj.get("spec")).get("ingressClassName")
    if CLASS_ANNOTATION in annotations and class_name is not None and \
            annotations[CLASS_ANNOTATION] != class_name:
        errs.append(field.invalid(Path("annotations").child(CLASS_ANNOTATION),
                                  annotations[CLASS_ANNOTATION],
                                  "must match `ingressClassName` when both are specified"))
    return errs


def validate_ingress_update(new: Mapping[str, Any], old: Mapping[str, Any]
                            ) -> list[FieldError]:
    """`ValidateIngressUpdate` past the object metadata: the spec, with the leniency upstream
    keeps for what the stored Ingress already had (an invalid TLS secret name, invalid rules
    under a wildcard host)."""
    old_spec = _d(old.get("spec"))
    allow_secret = any(_secret_name_errors(str(_d(t).get("secretName") or ""))
                       for t in _l(old_spec.get("tls")))
    allow_wildcard = any("*" in str(_d(r).get("host") or "") and
                         _rule_value_errors(_d(r), Path())
                         for r in _l(old_spec.get("rules")))
    return _spec_errors(_d(new.get("spec")), allow_invalid_secret=allow_secret,
                        allow_invalid_wildcard_rule=allow_wildcard)


def warnings_on_create(obj: Mapping[str, Any]) -> list[str]:
    """upstream's WarningsOnCreate (the deprecated class annotation), then ephemera's."""
    annotations = _d(_d(obj.get("metadata")).get("annotations"))
    out = [CLASS_ANNOTATION_WARNING] if CLASS_ANNOTATION in annotations else []
    return [*out, WARNING]


def _spec_errors(spec: dict[str, Any], *, allow_invalid_secret: bool,
                 allow_invalid_wildcard_rule: bool) -> list[FieldError]:
    """`ValidateIngressSpec`."""
    errs: list[FieldError] = []
    rules = _l(spec.get("rules"))
    if not rules and spec.get("defaultBackend") is None:
        shown = GoText("[]networking.IngressRule{}" if isinstance(spec.get("rules"), list)
                       else "[]networking.IngressRule(nil)")  # Go's %#v of the rule list
        errs.append(field.invalid(_SPEC, shown,
                                  "either `defaultBackend` or `rules` must be specified"))
    if spec.get("defaultBackend") is not None:
        errs.extend(_backend_errors(_d(spec["defaultBackend"]), _SPEC.child("defaultBackend")))
    for i, rule in enumerate(rules):
        path = _SPEC.child("rules").index(i)
        host = _d(rule).get("host") or ""
        wildcard = False
        if host:
            if _is_ip(host):
                errs.append(field.invalid(path.child("host"), host,
                                          "must be a DNS name, not an IP address"))
            wildcard = "*" in host
            errs.extend(field.invalid(path.child("host"), host, m) for m in _host_errors(host))
        if not wildcard or not allow_invalid_wildcard_rule:
            errs.extend(_rule_value_errors(_d(rule), path))
    for i, tls in enumerate(_l(spec.get("tls"))):
        path = _SPEC.child("tls").index(i)
        for j, host in enumerate(_l(_d(tls).get("hosts"))):
            errs.extend(field.invalid(path.child("hosts").index(j), host, m)
                        for m in _host_errors(str(host)))
        if not allow_invalid_secret:
            secret = str(_d(tls).get("secretName") or "")
            errs.extend(field.invalid(path.child("secretName"), secret, m)
                        for m in _secret_name_errors(secret))
    class_name = spec.get("ingressClassName")
    if class_name is not None:
        errs.extend(field.invalid(_SPEC.child("ingressClassName"), class_name, m)
                    for m in v.dns_subdomain_name(str(class_name), False))
    return errs


def _secret_name_errors(name: str) -> list[str]:
    return v.dns_subdomain_name(name, False) if name else []


def _rule_value_errors(rule: dict[str, Any], path: Path) -> list[FieldError]:
    """`validateIngressRuleValue`: an http rule has paths, each valid."""
    http = rule.get("http")
    if http is None:
        return []
    http_path = path.child("http")
    paths = _l(_d(http).get("paths"))
    errs: list[FieldError] = []
    if not paths:
        errs.append(field.required(http_path.child("paths")))
    for i, item in enumerate(paths):
        errs.extend(_path_errors(_d(item), http_path.child("paths").index(i)))
    return errs


def _path_errors(item: dict[str, Any], path: Path) -> list[FieldError]:
    """`validateHTTPIngressPath`."""
    kind = item.get("pathType")
    if kind is None:
        return [field.required(path.child("pathType"), "pathType must be specified")]
    value = str(item.get("path") or "")
    errs: list[FieldError] = []
    if kind in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errs.append(field.invalid(path.child("path"), value, "must be an absolute path"))
        if value:
            errs.extend(field.invalid(path.child("path"), value, f"must not contain '{seq}'")
                        for seq in _INVALID_SEQUENCES if seq in value)
            errs.extend(field.invalid(path.child("path"), value, f"cannot end with '{suffix}'")
                        for suffix in _INVALID_SUFFIXES if value.endswith(suffix))
    elif kind == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errs.append(field.invalid(path.child("path"), value, "must be an absolute path"))
    else:
        errs.append(field.not_supported(path.child("pathType"), kind, PATH_TYPES))
    errs.extend(_backend_errors(_d(item.get("backend")), path.child("backend")))
    return errs


def _backend_errors(backend: dict[str, Any], path: Path) -> list[FieldError]:
    """`validateIngressBackend`: a Service (name, port name or number) or a resource."""
    resource, service = backend.get("resource"), backend.get("service")
    if resource is not None and service is not None:
        return [field.invalid(path, "", "cannot set both resource and service backends")]
    if resource is not None:
        return _typed_reference_errors(_d(resource), path.child("resource"))
    if service is None:
        return [field.invalid(path, "", "resource or service backend is required")]
    service = _d(service)
    errs: list[FieldError] = []
    name = str(service.get("name") or "")
    service_path = path.child("service")
    if not name:
        errs.append(field.required(service_path.child("name")))
    else:
        errs.extend(field.invalid(service_path.child("name"), name, m)
                    for m in services.service_name_errors(name, False))
    port = _d(service.get("port"))
    port_name, number = str(port.get("name") or ""), port.get("number") or 0
    if port_name and number:
        errs.append(field.invalid(path, "", "cannot set both port name & port number"))
    elif port_name:
        errs.extend(field.invalid(service_path.child("port").child("name"), port_name, m)
                    for m in v.port_name_errors(port_name))
    elif number:
        errs.extend(field.invalid(service_path.child("port").child("number"), number, m)
                    for m in v.port_num_errors(int(number)))
    else:
        errs.append(field.required(path, "port name or number is required"))
    return errs


def _typed_reference_errors(ref: dict[str, Any], path: Path) -> list[FieldError]:
    """`validateIngressTypedLocalObjectReference`."""
    errs: list[FieldError] = []
    group = ref.get("apiGroup")
    if group is not None:
        errs.extend(field.invalid(path.child("apiGroup"), group, m)
                    for m in meta.dns1123_subdomain_errors(str(group)))
    for key in ("kind", "name"):
        value = str(ref.get(key) or "")
        if not value:
            errs.append(field.required(path.child(key)))
        else:
            errs.extend(field.invalid(path.child(key), value, m)
                        for m in v.path_segment_name(value, False))
    return errs


# --- status ---------------------------------------------------------------------------------


def validate_ingress_status(obj: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateIngressLoadBalancerStatus` of a `/status` write past the metadata."""
    errs: list[FieldError] = []
    base = Path("status").child("loadBalancer").child("ingress")
    for i, entry in enumerate(_l(_d(_d(obj.get("status")).get("loadBalancer")).get("ingress"))):
        path, entry = base.index(i), _d(entry)
        ip, hostname = str(entry.get("ip") or ""), str(entry.get("hostname") or "")
        if ip and not _is_ip(ip):
            errs.append(field.invalid(path.child("ip"), ip, _IP_ERROR))
        if hostname:
            errs.extend(field.invalid(path.child("hostname"), hostname, m)
                        for m in meta.dns1123_subdomain_errors(hostname))
            if _is_ip(hostname):
                errs.append(field.invalid(path.child("hostname"), hostname,
                                          "must be a DNS name, not an IP address"))
    return errs


# --- printing -------------------------------------------------------------------------------


def table_cells(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """The Class, Hosts, Address and Ports cells of upstream's printer (`formatHosts`: at
    most three hosts, `*` for none; the addresses each once, sorted, unclipped, as the
    server prints wide)."""
    spec = _d(obj.get("spec"))
    class_name = spec.get("ingressClassName")
    rules = _l(spec.get("rules"))
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        host = _d(rule).get("host")
        if not more and host:
            hosts.append(str(host))
    host_text = ",".join(hosts) if hosts else "*"
    if more:
        host_text = f"{host_text} + {len(rules) - 3} more..."
    addresses = {str(_d(e).get("ip") or _d(e).get("hostname") or "")
                 for e in _l(_d(_d(obj.get("status")).get("loadBalancer")).get("ingress"))}
    address = ",".join(sorted(a for a in addresses if a))  # a Go string set's List()
    ports = "80, 443" if spec.get("tls") else "80"
    return (str(class_name) if class_name is not None else "<none>", host_text, address, ports)
