"""Field paths, the causes the API server reports, and apimachinery's string checks (pure).

`IsLabelKey` and `IsLabelValue` are `staging/src/k8s.io/apimachinery/pkg/api/validate/content/
kube.go`'s; `IsDNS1123Label`, `IsDNS1123Subdomain`, `IsEnvVarName` (with `hasChDirPrefix`)
`.../pkg/util/validation/validation.go`'s; the wording of a cause is `field.Error.ErrorBody`
(`.../pkg/util/validation/field/errors.go`); labels and annotations are checked as
`ValidateLabels` (`.../pkg/apis/meta/v1/validation`) and `ValidateAnnotations`
(`.../pkg/api/validation/objectmeta.go`: qualified keys, 256 KiB in all) check them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Key:
    """A map key in a field path (`labels[team]`, `requests[cpu]`)."""

    name: str


PathPart = str | int | Key
Path = tuple[PathPart, ...]


def format_path(path: Iterable[PathPart]) -> str:
    """`spec.containers[0].resources.requests[cpu]`, as the API server writes field paths."""
    text = ""
    for part in path:
        if isinstance(part, Key):
            text += f"[{part.name}]"
        elif isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


@dataclass(frozen=True)
class Cause:
    """One problem in an object, as in a `Status`'s `details.causes[]`."""

    path: Path
    reason: str
    """`FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`,
    `FieldValueDuplicate`, `FieldValueNotFound`, `FieldValueForbidden`, `FieldValueTooLong`;
    `BadRequest` for a value the API server cannot decode."""
    message: str

    @property
    def field(self) -> str:
        return format_path(self.path)


QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _show(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return json.dumps(value, sort_keys=True)


def invalid(path: Path, value: object, detail: str) -> Cause:
    return Cause(path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {detail}")


def required(path: Path, detail: str = "") -> Cause:
    return Cause(path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def not_supported(path: Path, value: object, supported: Iterable[str]) -> Cause:
    values = ", ".join(json.dumps(v) for v in supported)
    return Cause(
        path,
        "FieldValueNotSupported",
        f"Unsupported value: {_show(value)}: supported values: {values}",
    )


def duplicate(path: Path, value: object) -> Cause:
    return Cause(path, "FieldValueDuplicate", f"Duplicate value: {_show(value)}")


def not_found(path: Path, value: object) -> Cause:
    return Cause(path, "FieldValueNotFound", f"Not found: {_show(value)}")


def forbidden(path: Path, detail: str) -> Cause:
    return Cause(path, "FieldValueForbidden", f"Forbidden: {detail}")


# --- apimachinery's string checks ---------------------------------------------------------
def _regex_error(message: str, pattern: str, *examples: str) -> str:
    shown = "".join(f" or '{e}', " if i else f"'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY = re.compile(f"^{_LABEL_KEY_FMT}$")
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_FMT = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(f"^{_DNS_LABEL_FMT}$")
_DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
_DNS_SUBDOMAIN_FMT = f"{_DNS_LABEL_FMT}(\\.{_DNS_LABEL_FMT})*"
_DNS_SUBDOMAIN = re.compile(f"^{_DNS_SUBDOMAIN_FMT}$")
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_ENV_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"
_ENV = re.compile(f"^{_ENV_FMT}$")
_ENV_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
    "or '.', and must not start with a digit"
)
MAX_LABEL_LENGTH = 63
MAX_SUBDOMAIN_LENGTH = 253
MAX_ANNOTATIONS_BYTES = 256 * 1024


def _max_len(n: int) -> str:
    return f"must be no more than {n} bytes"


def dns1123_subdomain_problems(value: str) -> list[str]:
    problems = [_max_len(MAX_SUBDOMAIN_LENGTH)] if len(value) > MAX_SUBDOMAIN_LENGTH else []
    if not _DNS_SUBDOMAIN.match(value):
        problems.append(_regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return problems


def dns1123_label_problems(value: str) -> list[str]:
    problems = [_max_len(MAX_LABEL_LENGTH)] if len(value) > MAX_LABEL_LENGTH else []
    if not _DNS_LABEL.match(value):
        if _DNS_SUBDOMAIN.match(value):
            problems.append("must not contain dots")
        else:
            problems.append(_regex_error(_DNS_LABEL_MSG, _DNS_LABEL_FMT, "my-name", "123-abc"))
    return problems


def label_key_problems(key: str) -> list[str]:
    """`IsLabelKey` (a qualified name): `[prefix/]name`."""
    parts = key.split("/")
    problems: list[str] = []
    if len(parts) > 2:
        example = _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {example} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems += [f"prefix part {p}" for p in dns1123_subdomain_problems(prefix)]
    name = parts[-1]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > MAX_LABEL_LENGTH:
        problems.append(f"name part {_max_len(MAX_LABEL_LENGTH)}")
    if not _LABEL_KEY.match(name):
        problems.append(
            "name part "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = [_max_len(MAX_LABEL_LENGTH)] if len(value) > MAX_LABEL_LENGTH else []
    if not _LABEL_VALUE.match(value):
        problems.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return problems


def env_var_name_problems(name: str) -> list[str]:
    problems = []
    if not _ENV.match(name):
        problems.append(
            _regex_error(_ENV_MSG, _ENV_FMT, "my.env-name", "MY_ENV.NAME", "MyEnvName1")
        )
    if name == ".":
        problems.append("must not be '.'")
    elif name == "..":
        problems.append("must not be '..'")
    elif name.startswith(".."):
        problems.append("must not start with '..'")
    return problems


# --- metadata -----------------------------------------------------------------------------
def labels_causes(labels: Mapping[str, Any], path: Path) -> list[Cause]:
    """`ValidateLabels`: each key a qualified name, each value a label value."""
    causes = []
    for key, value in labels.items():
        at = (*path, Key(str(key)))
        causes += [invalid(at, key, p) for p in label_key_problems(str(key))]
        causes += [invalid(at, value, p) for p in label_value_problems(str(value))]
    return causes


def metadata_causes(meta: Mapping[str, Any], path: Path = ("metadata",)) -> list[Cause]:
    """Labels (`ValidateLabels`) and annotations (`ValidateAnnotations`) of an object."""
    causes = labels_causes(meta.get("labels") or {}, (*path, "labels"))
    annotations = meta.get("annotations") or {}
    size = 0
    for key, value in annotations.items():
        size += len(str(key)) + len(str(value))
        at = (*path, "annotations", Key(str(key)))
        causes += [invalid(at, key, p) for p in label_key_problems(str(key).lower())]
    if size > MAX_ANNOTATIONS_BYTES:
        causes.append(
            Cause(
                (*path, "annotations"),
                "FieldValueTooLong",
                f"Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes",
            )
        )
    return causes
