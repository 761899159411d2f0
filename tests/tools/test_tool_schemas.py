import pytest

from verl.tools.schemas import OpenAIFunctionToolSchema

SCHEMA = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "find a thing",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["key"],
        },
    },
}


def test_round_trip():
    schema = OpenAIFunctionToolSchema.from_dict(SCHEMA)
    assert schema.name == "lookup"
    assert schema.to_dict() == SCHEMA


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: s.update(type="retrieval"), r"tool_schema.type: only 'function'"),
        (lambda s: s.pop("function"), r"tool_schema.function: must be a mapping"),
        (lambda s: s["function"].update(name="bad name!"), r"tool_schema.function.name: must be an identifier"),
        (lambda s: s["function"].update(extra=1), r"tool_schema.function: unknown keys \['extra'\]"),
        (lambda s: s["function"]["parameters"].update(type="array"), r"parameters.type: must be 'object'"),
        (lambda s: s["function"]["parameters"].update(required=["missing"]), r"\['missing'\] are not in properties"),
    ],
)
def test_bad_schemas_name_the_key(mutate, message):
    import copy

    data = copy.deepcopy(SCHEMA)
    mutate(data)
    with pytest.raises(ValueError, match=message):
        OpenAIFunctionToolSchema.from_dict(data)


def test_check_arguments():
    schema = OpenAIFunctionToolSchema.from_dict(SCHEMA)
    assert schema.check_arguments({"key": "a", "n": 2}) is None
    assert "missing required argument(s) ['key']" in schema.check_arguments({"n": 2})
    assert "unknown argument(s) ['k']" in schema.check_arguments({"key": "a", "k": 1})
    assert "argument 'n' must be of type integer, got str" in schema.check_arguments({"key": "a", "n": "2"})
    assert "argument 'n' must be of type integer, got bool" in schema.check_arguments({"key": "a", "n": True})
    assert "must be a JSON object, got list" in schema.check_arguments([1])
