"""`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: the TokenRequest API, as
upstream's `pkg/registry/core/serviceaccount/storage/token.go` does it (what
`kubectl create token NAME` and the kubelet's projected `serviceAccountToken` volumes call).

Order: decode and field-validate the body (`authentication.k8s.io/v1` TokenRequest); the
body's name and namespace, when given, must match the URL (422); the ServiceAccount must exist
(404); `spec.audiences` defaults to the apiserver's audiences and `spec.expirationSeconds` to
3600; validation (`may not specify a duration less than 10 minutes`, `... larger than 2^32
seconds`, 422); `spec.boundObjectRef` names a Pod (which must run as this ServiceAccount;
its node, when it has one, goes into the token too), a Secret or a Node, and its uid, when
given, must match (409); then the signed token in `status.token` with
`status.expirationTimestamp`, answered 201. Nothing is stored.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from aiohttp import web

from ephemera.api import errors, field, fieldvalidation, meta
from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.apiserver.body import check_object_content_type, decode_object, read_body
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import core_resource
from ephemera.apiserver.rest import check_kind, dry_run, request_user, respond
from ephemera.apiserver.serviceaccounttoken import TokenIssuer, bound_claims

API_VERSION = "authentication.k8s.io/v1"
KIND = "TokenRequest"
DEFINITION = "io.k8s.api.authentication.v1.TokenRequest"
GROUP = "authentication.k8s.io"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32

SERVICE_ACCOUNTS = core_resource("serviceaccounts")
PODS = core_resource("pods")
SECRETS = core_resource("secrets")
NODES = core_resource("nodes")


def validate_token_request(request: dict[str, Any]) -> list[field.FieldError]:
    """Upstream's `ValidateTokenRequest`."""
    seconds = int((request.get("spec") or {}).get("expirationSeconds") or 0)
    errs: list[field.FieldError] = []
    if seconds < MIN_EXPIRATION_SECONDS:
        errs.append(field.invalid("spec.expirationSeconds", seconds,
                                  "may not specify a duration less than 10 minutes"))
    if seconds > MAX_EXPIRATION_SECONDS:
        errs.append(field.invalid("spec.expirationSeconds", seconds,
                                  "may not specify a duration larger than 2^32 seconds"))
    return errs


async def _get_or_none(registry: Registry, resource: Any, namespace: str, name: str
                       ) -> dict[str, Any] | None:
    try:
        return await registry.get(resource, namespace, name)
    except StatusError as err:
        if err.code == 404:
            return None
        raise


async def create_token(request: web.Request, registry: Registry, issuer: TokenIssuer | None,
                       audiences: list[str], namespace: str, name: str,
                       max_body_bytes: int) -> web.Response:
    if issuer is None:
        raise errors.not_found(SERVICE_ACCOUNTS.plural, name)  # no signing key configured
    check_object_content_type(request)
    body = await read_body(request, max_body_bytes)
    token_request, duplicates = decode_object(body, KIND)
    check_kind(token_request, API_VERSION, KIND)
    is_dry_run = dry_run(request.query.getall("dryRun", []), "CreateOptions")
    warnings = fieldvalidation.check(token_request, DEFINITION,
                                     request.query.get("fieldValidation"), KIND, "v1",
                                     duplicates, "CreateOptions")
    md = meta.ensure_metadata(token_request)
    if md.get("name") and md["name"] != name:
        raise errors.invalid(KIND, name, [field.invalid(
            "metadata.name", md["name"], "must match the service account name if specified")],
            group=GROUP)
    if md.get("namespace") and md["namespace"] != namespace:
        raise errors.invalid(KIND, name, [field.invalid(
            "metadata.namespace", md["namespace"],
            "must match the service account namespace if specified")], group=GROUP)
    account = await registry.get(SERVICE_ACCOUNTS, namespace, name)
    spec = meta.child_object(token_request, "spec")
    if not spec.get("audiences"):
        spec["audiences"] = list(audiences)
    if spec.get("expirationSeconds") is None:
        spec["expirationSeconds"] = DEFAULT_EXPIRATION_SECONDS
    md["name"], md["namespace"] = name, namespace
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    md["creationTimestamp"] = meta.rfc3339(now)
    token_request["status"] = {}
    errs = validate_token_request(token_request)
    if errs:
        raise errors.invalid(KIND, "", errs, group=GROUP)
    # Admission (NodeRestriction: a node may only ask for tokens bound to its own pods).
    await registry.admit(registry.admission_request(
        "CREATE", SERVICE_ACCOUNTS, namespace, name, copy.deepcopy(token_request),
        subresource="token", user=request_user(request), dry_run=is_dry_run))

    pod = secret = node = None
    ref = spec.get("boundObjectRef")
    if ref:
        kind, group = ref.get("kind") or "", (ref.get("apiVersion") or "").rpartition("/")[0]
        ref_name = str(ref.get("name") or "")
        if group == "" and kind == "Pod":
            pod = await registry.get(PODS, namespace, ref_name)
            pod_spec = pod.get("spec") or {}
            if pod_spec.get("serviceAccountName") != name:
                raise errors.bad_request(
                    f'cannot bind token for serviceaccount {go_quote(name)} to pod running with '
                    "different serviceaccount name.")
            bound = pod
            if pod_spec.get("nodeName"):
                node = await _get_or_none(registry, NODES, "", str(pod_spec["nodeName"]))
        elif group == "" and kind == "Secret":
            bound = secret = await registry.get(SECRETS, namespace, ref_name)
        elif group == "" and kind == "Node":
            bound = node = await registry.get(NODES, "", ref_name)
        else:
            shown = f"{group}/{ref.get('apiVersion', '').rpartition('/')[2]}, Kind={kind}"
            raise errors.bad_request(f"cannot bind token to object of type {shown}")
        uid = str((bound.get("metadata") or {}).get("uid") or "")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(
                kind, ref_name,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                "in record. The object might have been deleted and then recreated")

    seconds = int(spec["expirationSeconds"])
    claims = bound_claims(account, seconds, spec["audiences"], pod=pod, secret=secret,
                          node=node, now=now)
    token_request["status"] = {
        "token": issuer.sign(claims),
        "expirationTimestamp": meta.rfc3339(now + dt.timedelta(seconds=seconds)),
    }
    return respond(token_request, 201, warnings)
