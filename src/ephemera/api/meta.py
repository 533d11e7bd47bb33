"""Small helpers for object metadata: timestamps in Kubernetes' RFC 3339 form, `generateName`
with upstream's alphabet, UIDs, and apimachinery's name, label and annotation validation
with its exact messages (`IsDNS1123Subdomain`, `IsDNS1123Label`, `IsQualifiedName`,
`IsValidLabelValue`, `ValidateObjectMeta`)."""

from __future__ import annotations

import random
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from ephemera.api import field
from ephemera.api.field import FieldError

# --- time -------------------------------------------------------------------------------


def rfc3339(moment: datetime) -> str:
    """`metav1.Time` on the wire: seconds precision, UTC, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_in_zone(moment: datetime) -> str:
    """Go's `time.RFC3339` of a time in its own zone: `Z` for UTC, else the offset."""
    text = moment.strftime("%Y-%m-%dT%H:%M:%S%z")
    if text.endswith("+0000"):
        return text[:-5] + "Z"
    return f"{text[:-2]}:{text[-2:]}"


def now() -> datetime:
    return datetime.now(UTC)


_last_second: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The current second as `rfc3339` writes it, formatted once a second (a write stamps
    several fields: creation, conditions, managedFields)."""
    global _last_second
    second = int(time.time())
    if second != _last_second[0]:
        _last_second = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _last_second[1]


def rfc3339_after(seconds: int, start: datetime | None = None) -> str:
    return rfc3339((start or now()) + timedelta(seconds=seconds))


def parse_rfc3339(text: str) -> datetime:
    """Parse `2024-01-02T03:04:05Z` (also with fractional seconds or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_time(value: Any) -> datetime | None:
    """A stored `metav1.Time` or `MicroTime` as an aware datetime (UTC when it has no zone);
    None when it is unset or does not parse."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = parse_rfc3339(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# --- names ------------------------------------------------------------------------------

# upstream `k8s.io/apiserver/pkg/storage/names`: no vowels, no 0, 1, 3.
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_NAME_LENGTH = 63
RANDOM_LENGTH = 5
MAX_GENERATED_NAME_LENGTH = MAX_NAME_LENGTH - RANDOM_LENGTH


def generate_name(base: str) -> str:
    """`SimpleNameGenerator.GenerateName`: the base cut to 58 characters plus 5 random ones.
    Not a secret, so not from the system's entropy (an `os.urandom` call a character cost
    ~15 µs a name), but from `random`'s shared generator, as upstream's `utilrand.String` is
    math/rand; `random` seeds it again in a forked child, so apiserver workers do not
    generate the same names."""
    if len(base) > MAX_GENERATED_NAME_LENGTH:
        base = base[:MAX_GENERATED_NAME_LENGTH]
    return base + "".join(random.choices(GENERATE_NAME_ALPHABET, k=RANDOM_LENGTH))


def new_uid() -> str:
    return str(uuid.uuid4())


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's `RegexError`, double spaces between examples included."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    text = message + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_MAX = 63
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_RE = re.compile(f"^{DNS1123_LABEL_FMT}$")

DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")

QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_MAX = 63
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QUALIFIED_NAME_RE = re.compile(f"^{QUALIFIED_NAME_FMT}$")

LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
LABEL_VALUE_MAX = 63
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_RE = re.compile(f"^{LABEL_VALUE_FMT}$")

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(_max_len(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL_RE.match(value):
        if _DNS1123_SUBDOMAIN_RE.match(value):
            errs.append("must not contain dots")  # a valid subdomain: only the dots are wrong
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(_max_len(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """`IsQualifiedName`: an optional DNS subdomain prefix and `/`, then a name part."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part " + _max_len(QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append("name part " + regex_error(
            _QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(_max_len(LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _mask_trailing_dash(name: str) -> str:
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def name_errors(name: str, *, label: bool = False, prefix: bool = False) -> list[str]:
    """`NameIsDNSSubdomain` (or `NameIsDNSLabel` for namespaces) with `prefix` for a
    generateName (a trailing dash is allowed)."""
    if prefix:
        name = _mask_trailing_dash(name)
    return dns1123_label_errors(name) if label else dns1123_subdomain_errors(name)


def validate_object_meta(
    meta: dict[str, Any], *, namespaced: bool, dns_label_name: bool = False
) -> list[FieldError]:
    """`ValidateObjectMeta` for a create: name or generateName, namespace, labels and
    annotation keys and size."""
    errs: list[FieldError] = []
    path = field.Path("metadata")
    name = meta.get("name") or ""
    generate = meta.get("generateName") or ""
    if generate:
        errs.extend(field.invalid(path.child("generateName"), generate, m)
                    for m in name_errors(generate, label=dns_label_name, prefix=True))
    if not name:
        errs.append(field.required(path.child("name"), "name or generateName is required"))
    else:
        errs.extend(field.invalid(path.child("name"), name, m)
                    for m in name_errors(name, label=dns_label_name))
    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            errs.append(field.required(path.child("namespace")))
        else:
            errs.extend(field.invalid(path.child("namespace"), namespace, m)
                        for m in dns1123_label_errors(namespace))
    elif namespace:
        errs.append(field.forbidden(path.child("namespace"), "not allowed on this type"))
    errs.extend(validate_labels(meta.get("labels"), path.child("labels")))
    errs.extend(validate_annotations(meta.get("annotations"), path.child("annotations")))
    return errs


def validate_labels(labels: Any, path: field.Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if not labels:
        return errs
    if not isinstance(labels, dict):
        return [field.invalid(path, labels, "must be a map of strings")]
    for key, value in labels.items():
        errs.extend(field.invalid(path, key, m) for m in qualified_name_errors(key))
        if not isinstance(value, str):
            errs.append(field.invalid(path, value, "must be a string"))
            continue
        errs.extend(field.invalid(path, value, m) for m in label_value_errors(value))
    return errs


def validate_annotations(annotations: Any, path: field.Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if not annotations:
        return errs
    if not isinstance(annotations, dict):
        return [field.invalid(path, annotations, "must be a map of strings")]
    total = 0
    for key, value in annotations.items():
        errs.extend(field.invalid(path, key, m) for m in qualified_name_errors(key.lower()))
        total += len(key) + len(value if isinstance(value, str) else str(value))
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(field.too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def child_object(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """The object at `parent[key]`, made an empty one when it is missing, JSON `null` or
    not an object (a wrong type is refused earlier, by field validation at decode): Go
    decodes a null into a struct field as its zero value, an empty struct. For a field that
    is a struct value in upstream's types (an object's `metadata`, `spec` and `status`, a
    pod template's `spec`), not for a pointer, whose null means unset."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def ensure_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return child_object(obj, "metadata")


def drop_empty_metadata(md: dict[str, Any]) -> None:
    """ObjectMeta's maps and lists are `omitempty`: upstream never stores (nor records in
    managedFields) an empty or null one, so `annotations: {}` in a body or patch changes
    nothing."""
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in md and not md[key]:
            del md[key]


def name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return (meta.get("name") or "") if isinstance(meta, dict) else ""


def namespace_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return (meta.get("namespace") or "") if isinstance(meta, dict) else ""
