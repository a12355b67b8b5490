"""Shared pydantic base for the job model: camelCase on the wire, snake_case in Python.

Every model of the API forbids unknown fields, so a typo in a manifest is an error that names
the field instead of a setting silently ignored. Scalars are strict, as the CRD's types are:
`"yes"` is not a boolean and `"2"` not an integer (an integer is a number, as in the CRD).
Enum fields say `strict=False` so that they take their string values.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every job-model type."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, object]:
        """The JSON-compatible dict with camelCase keys, as stored in Kubernetes."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
