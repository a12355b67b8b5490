"""Shared pydantic base for the job model: camelCase on the wire, snake_case in Python.

Every model of the API forbids unknown fields, so a typo in a manifest is an error that names
the field instead of a setting silently ignored.
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
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, object]:
        """The JSON-compatible dict with camelCase keys, as stored in Kubernetes."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
