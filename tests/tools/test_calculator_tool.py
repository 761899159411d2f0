import asyncio

import pytest

from verl.tools.calculator_tool import CalculatorError, CalculatorTool, format_number, safe_eval


@pytest.mark.parametrize(
    "expression, value",
    [
        ("23*17", 391),
        ("2 + 3 * (4 - 1)", 11),
        ("-5 + +2", -3),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("2 ** 10", 1024),
        ("1 / 4", 0.25),
        ("(((1)))", 1),
        ("2 ** -1", 0.5),
        ("-(3 - 5)", 2),
        ("1.5 * 2", 3.0),
    ],
)
def test_safe_eval_computes_arithmetic(expression, value):
    assert safe_eval(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('ls')", "unsupported syntax Call"),
        ("x + 1", "unsupported syntax Name"),
        ("[1, 2]", "unsupported syntax List"),
        ("'a' * 3", "unsupported literal 'a'"),
        ("True + 1", "unsupported literal True"),
        ("1 << 2", "unsupported syntax LShift"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9 ** 9 ** 9", "exponent 387420489 is larger than 128"),
        ("10 ** 120", "more than 100 digits"),
        ("(10 ** 60) * (10 ** 60)", "more than 100 digits"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "invalid expression"),
        ("", "expression is empty"),
        ("1+" * 200 + "1", "longer than 256 characters"),
    ],
)
def test_safe_eval_refuses_with_a_reason(expression, message):
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace("*", r"\*")):
        safe_eval(expression)


def test_safe_eval_rejects_non_strings():
    with pytest.raises(CalculatorError, match="must be a string, got int"):
        safe_eval(5)


def test_format_number():
    assert format_number(6.0) == "6"
    assert format_number(391) == "391"
    assert format_number(1 / 3) == "0.333333333333"
    assert format_number(1e20) == "1e+20"


def test_calculator_tool_lifecycle_and_reward():
    tool = CalculatorTool()
    assert tool.name == "calculator"
    assert tool.get_openai_tool_schema().to_dict()["function"]["parameters"]["required"] == ["expression"]

    async def go():
        instance, _ = await tool.create("traj-1", ground_truth="391")
        response, reward, metrics = await tool.execute(instance, {"expression": "23*17"})
        assert response.text == "391" and reward == 0.0 and metrics["calculator_error"] == 0
        assert await tool.calc_reward(instance) == 1.0
        response, _, metrics = await tool.execute(instance, {"expression": "1/0"})
        assert response.text == "Error: division by zero" and metrics["calculator_error"] == 1
        response, _, _ = await tool.execute(instance, {"expression": "2+2"})
        assert await tool.calc_reward(instance) == 0.0
        await tool.release(instance)
        assert instance not in tool._instances

    asyncio.run(go())
