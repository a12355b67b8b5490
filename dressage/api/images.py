"""Container image references, checked against the grammar the kubelet parses them with.

A reference the API server accepts can still be one the kubelet cannot pull: it parses every
image with `github.com/distribution/reference` (`ParseNormalizedNamed`, via the kubelet's
`pkg/util/parsers.ParseImageName`) and fails the pod with `InvalidImageName` when that
refuses it. The grammar below is that package's (`regexp.go`: `pathComponent`, `separator`,
`domainNameComponent`, `tag`; `reference.go`: `Parse`, at most 255 characters of repository
path; `normalize.go`: `ParseNormalizedNamed`, which refuses an upper-case repository and a bare
64-hex identifier), with the digest rules of `github.com/opencontainers/go-digest`
(`algorithm.go`: `sha256`, `sha384`, `sha512`, lower-case hex of 64, 96 and 128 digits).

One rule is stricter than the parser: a first component with upper-case letters and neither a
`.` nor a port (`Dressage/runtime`) is taken by `splitDockerDomain` as a registry host named
`Dressage`, so the pull goes to a host that does not exist. Nobody means that; it is refused
as an upper-case repository name.
"""

from __future__ import annotations

import re

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PORT = r"(?::[0-9]+)"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
# A first component is a registry host exactly when the reference parser reads it as one and
# it is not an upper-case accident: it has a dot, or a port, or is localhost or an IPv6 address.
_REGISTRY = (
    rf"(?:(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+|localhost|{_IPV6}){_PORT}?"
    rf"|{_DOMAIN_COMPONENT}{_PORT})"
)
_REPOSITORY = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
"""The digest algorithms the kubelet's parser knows, and the hex length of each."""
_DIGEST = "(?:" + "|".join(f"{a}:[a-f0-9]{{{n}}}" for a, n in DIGEST_HEX_LENGTHS.items()) + ")"
IMAGE_REFERENCE_PATTERN = rf"^(?:{_REGISTRY}/)?{_REPOSITORY}(?::{_TAG})?(?:@{_DIGEST})?$"
"""`[registry[:port]/]repository[:tag][@digest]`; the CRD carries it, so the API server refuses
a bad image at `kubectl apply`."""
MAX_REPOSITORY_LENGTH = 255
MAX_TAG_LENGTH = 128

_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
_REGISTRY_RE = re.compile(rf"^{_REGISTRY}$")
_TAG_RE = re.compile(rf"^{_TAG}$")
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}$")
_DIGEST_SHAPE = re.compile(r"^([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*):(.*)$")
EXAMPLE = "ghcr.io/org/image:1.0 or ghcr.io/org/image@sha256:<64 hex digits>"


def _split(reference: str) -> tuple[str, str, str | None, str | None]:
    """(registry or '', repository, tag, digest) as the parser cuts them: the first component
    is the registry when it has a dot or a port or is localhost."""
    rest, _, digest = reference.partition("@")
    slash, colon = rest.rfind("/"), rest.rfind(":")
    tag = None
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, remainder, tag, digest or None
    return "", rest, tag, digest or None


def image_reference_problem(reference: str) -> str | None:
    """What is wrong with an image reference, in words a user can act on; None when the
    kubelet's parser accepts it."""
    if not reference:
        return "an image reference must not be empty"
    if any(c.isspace() for c in reference):
        return f"{reference!r} contains whitespace"
    if _IDENTIFIER.match(reference):
        return (
            f"{reference!r} is a 64-digit hex image id, not a reference: name the repository "
            f"({EXAMPLE})"
        )
    if _REFERENCE.match(reference) and len(_split(reference)[1]) <= MAX_REPOSITORY_LENGTH:
        return None
    registry, repository, tag, digest = _split(reference)
    if digest is not None:
        shape = _DIGEST_SHAPE.match(digest)
        if shape is None:
            return f"digest {digest!r} is not '<algorithm>:<hex>'"
        algorithm, hex_digits = shape.groups()
        length = DIGEST_HEX_LENGTHS.get(algorithm)
        if length is None:
            known = ", ".join(DIGEST_HEX_LENGTHS)
            return f"digest algorithm {algorithm!r} is not one the kubelet knows ({known})"
        if not re.fullmatch(r"[a-f0-9]*", hex_digits):
            return f"the {algorithm} digest must be lower-case hex digits, not {hex_digits!r}"
        if len(hex_digits) != length:
            return f"the {algorithm} digest must have {length} hex digits, not {len(hex_digits)}"
    if tag is not None and len(tag) > MAX_TAG_LENGTH:
        return f"tag is {len(tag)} characters long, more than {MAX_TAG_LENGTH}"
    if tag is not None and not _TAG_RE.match(tag):
        return (
            f"tag {tag!r} must be 1 to 128 letters, digits, '_', '.' or '-', not starting "
            "with '.' or '-'"
        )
    if registry and not _REGISTRY_RE.match(registry):
        return f"registry {registry!r} is not a host name or address with an optional port"
    if repository.lower() != repository:
        return (
            f"repository name {repository!r} must be lower case (only a registry host such as "
            "Registry.example.com, or the tag, may have upper-case letters)"
        )
    if len(repository) > MAX_REPOSITORY_LENGTH:
        return f"repository name is longer than {MAX_REPOSITORY_LENGTH} characters"
    return (
        f"{reference!r} is not an image reference: components of lower-case letters and digits "
        f"separated by '.', '_', '__' or '-', joined by '/' ({EXAMPLE})"
    )
