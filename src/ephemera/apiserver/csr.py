"""CertificateSigningRequests (`certificates.k8s.io/v1`): the rules of upstream's
`pkg/registry/certificates/certificates/strategy.go` and
`pkg/apis/certificates/validation`, used by the CSR strategy in
`ephemera.apiserver.strategy`.

- create: the requestor fields (`spec.username`, `uid`, `groups`, `extra`) come from the
  authenticated user, never from the body; the status starts empty (no pre-approved CSRs);
- update of the main resource: spec and status stay; `/approval`: only
  `status.conditions` change; `/status`: spec and the Approved/Denied conditions stay;
  conditions get `lastUpdateTime`/`lastTransitionTime` when missing;
- validation: `spec.request` a PEM `CERTIFICATE REQUEST` with a valid signature,
  `spec.signerName` and `spec.usages` required, known usages, `spec.expirationSeconds` at
  least 600, Approved and Denied exclusive, a certificate only when approved.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography import x509

from ephemera.api import field, meta
from ephemera.api.field import FieldError

APPROVED, DENIED = "Approved", "Denied"

KNOWN_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment",
    "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
    "decipher only", "any", "server auth", "client auth", "code signing", "email protection",
    "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping",
    "ocsp signing", "microsoft sgc", "netscape sgc",
]


def request_bytes(csr: dict[str, Any]) -> bytes:
    """`spec.request` decoded (base64 on the wire); b"" when absent or not base64."""
    value = (csr.get("spec") or {}).get("request") or ""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def parse_request(data: bytes) -> x509.CertificateSigningRequest:
    """The CSR in PEM `data`; ValueError with upstream's wording when it is not one."""
    if b"-----BEGIN CERTIFICATE REQUEST-----" not in data:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        request = x509.load_pem_x509_csr(data)
    except ValueError as err:
        # cryptography's text carries Rust debug output (`ParseError { kind: ShortData
        # ... }`): say it as Go's pem and asn1 packages do instead.
        text = str(err)
        if text.startswith("Unable to load PEM"):  # pem.Decode finds no block
            raise ValueError("PEM block type must be CERTIFICATE REQUEST") from None
        if "ShortData" in text:
            raise ValueError("asn1: syntax error: data truncated") from None
        raise ValueError("asn1: structure error: tags don't match") from None
    if not request.is_signature_valid:
        raise ValueError("x509: ECDSA verification failure")
    return request


def record_requestor(csr: dict[str, Any], user: Any) -> None:
    """PrepareForCreate's requestor fields from the authenticated `user` (a UserInfo)."""
    spec = csr.get("spec")
    if spec is None:
        spec = csr["spec"] = {}
    if not isinstance(spec, dict):
        return  # validation refuses it
    for key in ("username", "uid", "groups", "extra"):
        spec.pop(key, None)
    if user is None:
        return
    spec["username"] = user.name
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}


def prepare_for_create(csr: dict[str, Any]) -> None:
    csr["status"] = {}


def _stamp_conditions(status: dict[str, Any]) -> None:
    now = meta.now_rfc3339()
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict):
            condition.setdefault("lastUpdateTime", now)
            condition.setdefault("lastTransitionTime", now)


def _decisions(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") in (APPROVED, DENIED)]


def prepare_for_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    new["spec"] = old.get("spec") or {}
    new["status"] = old.get("status") or {}


def prepare_for_approval_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    conditions = (new.get("status") or {}).get("conditions")
    new["spec"] = old.get("spec") or {}
    status = dict(old.get("status") or {})
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)
    new["status"] = status
    _stamp_conditions(status)


def prepare_for_status_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    new["spec"] = old.get("spec") or {}
    status = new.setdefault("status", {})
    others = [c for c in status.get("conditions") or []
              if isinstance(c, dict) and c.get("type") not in (APPROVED, DENIED)]
    conditions = _decisions(old.get("status") or {}) + others
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)
    _stamp_conditions(status)


def validate(csr: dict[str, Any]) -> list[FieldError]:
    spec = csr.get("spec") or {}
    errs: list[FieldError] = []
    data = request_bytes(csr)
    if not spec.get("request"):
        errs.append(field.required("spec.request", ""))
    else:
        try:
            parse_request(data)
        except ValueError as err:
            errs.append(field.invalid("spec.request", "<request>", str(err)))
    if not spec.get("signerName"):
        errs.append(field.required("spec.signerName", ""))
    elif "/" not in str(spec["signerName"]):
        errs.append(field.invalid("spec.signerName", spec["signerName"],
                                  "must be a fully qualified domain and path of the form "
                                  "'example.com/signer-name'"))
    usages = spec.get("usages") or []
    if not usages:
        errs.append(field.required("spec.usages", "usages must be provided"))
    for i, usage in enumerate(usages):
        if usage not in KNOWN_USAGES:
            errs.append(field.not_supported(f"spec.usages[{i}]", usage, KNOWN_USAGES))
    seconds = spec.get("expirationSeconds")
    if seconds is not None and seconds < 600:
        errs.append(field.invalid("spec.expirationSeconds", seconds,
                                  "may not specify a duration less than 600 seconds "
                                  "(10 minutes)"))
    errs.extend(validate_status(csr))
    return errs


def validate_status(csr: dict[str, Any]) -> list[FieldError]:
    status = csr.get("status") or {}
    types = {c.get("type") for c in _decisions(status) if c.get("status", "True") == "True"}
    errs: list[FieldError] = []
    if {APPROVED, DENIED} <= types:
        errs.append(field.invalid("status.conditions", DENIED,
                                  "Approved and Denied conditions are mutually exclusive"))
    if status.get("certificate") and APPROVED not in types:
        errs.append(field.invalid("status.certificate", "<certificate data>",
                                  "certificate can only be set if an Approved condition "
                                  "is present"))
    return errs

