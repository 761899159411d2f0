"""OpenAI-style function-tool schemas, parsed tool calls, and the values tools return.

A schema is what the model sees (the chat template prints it in the system turn) and what the agent loop checks a
call against: ``{"type": "function", "function": {"name", "description", "parameters": <JSON schema object>}}``.

The classes are pydantic models with verl's names and fields (``model_validate`` / ``model_dump`` work as there).
Two things differ on purpose: a parameter's schema keeps keys besides ``type`` / ``description`` / ``enum`` (an
array's ``items``, a number's ``minimum``), so the model reads the schema as it was written; and
:meth:`OpenAIFunctionToolSchema.from_dict`, the YAML path, names the bad key of a malformed schema instead of
dropping unknown keys.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolCall",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter's JSON schema. ``type`` may be a list (``["integer", "number"]`` for ``int | float``) and
    ``enum`` may hold any JSON values; other JSON-schema keys are kept as given."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str] | None = None
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """A JSON-schema object: ``properties`` maps argument names to their schemas."""

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class OpenAIFunctionSchema(BaseModel):
    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=OpenAIFunctionParametersSchema)
    strict: bool = False

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=True)


class OpenAIFunctionToolSchema(BaseModel):
    """``{"type": "function", "function": {...}}``, the format chat templates and OpenAI-style APIs take."""

    type: str = "function"
    function: OpenAIFunctionSchema

    @property
    def name(self) -> str:
        return self.function.name

    def to_dict(self) -> dict[str, Any]:
        """The schema as the chat template receives it: the keys that were given, nothing defaulted or null."""
        return self.model_dump(exclude_unset=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any, where: str = "tool_schema") -> OpenAIFunctionToolSchema:
        """Validate ``data``; errors name the offending key under ``where`` (e.g. the YAML entry)."""
        if isinstance(data, OpenAIFunctionToolSchema):
            return data
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
            raise ValueError(
                f"{where}.function.name: must be an identifier-like string (letters, digits, _ . -), got {name!r}"
            )
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
        for key, prop in properties.items():
            if not isinstance(prop, dict):
                raise ValueError(
                    f"{where}.function.parameters.properties.{key}: must be a JSON schema mapping, got {prop!r}"
                )
        required = list(params.get("required") or [])
        missing = [r for r in required if r not in properties]
        if missing:
            raise ValueError(f"{where}.function.parameters.required: {missing} are not in properties")
        # every structural key is passed explicitly, so to_dict() renders the complete schema
        body: dict[str, Any] = {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": dict(properties), "required": required},
        }
        if "strict" in function:
            body["strict"] = bool(function["strict"])
        return cls.model_validate({"type": "function", "function": body})

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
            prop = params.properties.get(key)
            expected = prop.type if prop is not None else None
            if expected and not _json_type_matches(value, expected):
                return f"argument {key!r} must be of type {expected}, got {type(value).__name__}"
        return None


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
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


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as a parser read it: the name and the arguments as the model wrote them (a JSON string)."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with its arguments decoded."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode the arguments; returns the call (empty arguments when unreadable) and whether decoding failed."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except (json.JSONDecodeError, TypeError):
            arguments = None
        failed = not isinstance(arguments, dict)
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={} if failed else arguments), failed


class OpenAIFunctionToolCall(BaseModel):
    """One entry of an assistant message's ``tool_calls``."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool hands back to the model: text, and images / videos for multimodal models (each a list)."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _media_are_lists(cls, values: Any) -> Any:
        if isinstance(values, dict):
            for key in ("image", "video"):
                if key in values and values[key] is not None and not isinstance(values[key], list):
                    raise ValueError(
                        f"ToolResponse.{key} must be a list (wrap a single {key} as [{key}]), got "
                        f"{type(values[key]).__name__}"
                    )
        return values

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video
