"""OpenAI-style function-tool schemas and the values tools return.

A schema is what the model sees (the chat template prints it in the system turn) and what the agent loop checks a
call against: ``{"type": "function", "function": {"name", "description", "parameters": <JSON schema object>}}``.
Plain dataclasses keep the YAML round trip exact; :meth:`OpenAIFunctionToolSchema.from_dict` names the bad key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class OpenAIFunctionParametersSchema:
    """A JSON-schema object: ``properties`` maps argument names to their JSON schemas."""

    type: str = "object"
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "properties": dict(self.properties), "required": list(self.required)}


@dataclass(frozen=True)
class OpenAIFunctionSchema:
    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = field(default_factory=OpenAIFunctionParametersSchema)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters.to_dict()}


@dataclass(frozen=True)
class OpenAIFunctionToolSchema:
    """``{"type": "function", "function": {...}}``, the format chat templates and OpenAI-style APIs take."""

    function: OpenAIFunctionSchema
    type: str = "function"

    @property
    def name(self) -> str:
        return self.function.name

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "function": self.function.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "tool_schema") -> OpenAIFunctionToolSchema:
        """Validate ``data``; errors name the offending key under ``where`` (e.g. the YAML entry)."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: must be a mapping, got {type(data).__name__}")
        kind = data.get("type", "function")
        if kind != "function":
            raise ValueError(f"{where}.type: only 'function' tools are supported, got {kind!r}")
        function = data.get("function")
        if not isinstance(function, dict):
            raise ValueError(f"{where}.function: must be a mapping with name/description/parameters, got {function!r}")
        unknown = set(function) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ValueError(f"{where}.function: unknown keys {sorted(unknown)}")
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{where}.function.name: must be an identifier-like string (letters, digits, _ . -), "
                             f"got {name!r}")
        description = function.get("description", "")
        if not isinstance(description, str):
            raise ValueError(f"{where}.function.description: must be a string, got {type(description).__name__}")
        params = function.get("parameters") or {}
        if not isinstance(params, dict):
            raise ValueError(f"{where}.function.parameters: must be a JSON-schema object, got {params!r}")
        if params.get("type", "object") != "object":
            raise ValueError(f"{where}.function.parameters.type: must be 'object', got {params.get('type')!r}")
        properties = params.get("properties") or {}
        if not isinstance(properties, dict):
            raise ValueError(f"{where}.function.parameters.properties: must be a mapping, got {properties!r}")
        required = list(params.get("required") or [])
        missing = [r for r in required if r not in properties]
        if missing:
            raise ValueError(f"{where}.function.parameters.required: {missing} are not in properties")
        parameters = OpenAIFunctionParametersSchema(properties=dict(properties), required=required)
        return cls(OpenAIFunctionSchema(name=name, description=description, parameters=parameters))

    def check_arguments(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit this schema (missing required, unknown or wrongly typed keys), or None.

        A shallow check of what models get wrong most; tools validate values themselves.
        """
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        params = self.function.parameters
        missing = [r for r in params.required if r not in arguments]
        if missing:
            return f"missing required argument(s) {missing}"
        unknown = [k for k in arguments if k not in params.properties]
        if unknown and params.properties:
            return f"unknown argument(s) {unknown}; expected {sorted(params.properties)}"
        for key, value in arguments.items():
            expected = (params.properties.get(key) or {}).get("type")
            if expected and not _json_type_matches(value, expected):
                return f"argument {key!r} must be of type {expected}, got {type(value).__name__}"
        return None


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
    "object": (dict,), "null": (type(None),),
}


def _json_type_matches(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        types = _JSON_TYPES.get(name)
        if types is None:
            return True  # a type this check does not know: leave it to the tool
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, types):
            return True
    return False


@dataclass
class ToolResponse:
    """What a tool hands back to the model: text (multimodal payloads are future work)."""

    text: str = ""
