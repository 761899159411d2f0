import sys
import types

import pytest

from verl.utils.reward_score import (
    addition,
    arith_seq,
    default_compute_score,
    gsm8k,
    long_tail,
    target_digit,
    tool_calc,
)
from verl.utils.reward_score import math as math_light
from verl.utils.reward_score import math_verify as mv_scorer


@pytest.mark.parametrize(
    ("response", "score"),
    [
        ("77777777", 1.0),
        ("7777", 0.5),  # too short: missing positions count as misses
        ("7777777777", 1.0),  # tokens past the eighth are ignored
        ("17777777", 7 / 8),
        ("", 0.0),
        ("abcdefgh", 0.0),
    ],
)
def test_target_digit(response, score):
    assert target_digit.compute_score(response, "77777777") == pytest.approx(score)


@pytest.mark.parametrize(
    "response, score",
    [
        ("7777", 1.0),
        ("77", 0.5),  # stopped early: the missing characters count as misses
        ("77777777", 0.5),  # ran on: the extra characters count too
        ("7377", 0.75),
        ("", 0.0),
    ],
)
def test_long_tail_rewards_the_digit_and_the_length(response, score):
    assert long_tail.compute_score(response, "7777") == pytest.approx(score)
    assert default_compute_score("synthetic/long_tail", response, "7777") == pytest.approx(score)


def test_target_digit_rejects_empty_ground_truth():
    with pytest.raises(ValueError, match="target_digit ground_truth must be a non-empty string"):
        target_digit.compute_score("7", "")


@pytest.mark.parametrize(
    ("response", "score"),
    [("11,14,17", 1.0), (" 11, 14 ,17,20", 1.0), ("11,14,20", 2 / 3), ("14,17,20", 0.0), ("11", 1 / 3), ("", 0.0)],
)
def test_arith_seq(response, score):
    assert arith_seq.compute_score(response, "11,14,17") == pytest.approx(score)


def test_arith_seq_rejects_empty_ground_truth():
    with pytest.raises(ValueError, match="arith_seq ground_truth must list comma-separated terms"):
        arith_seq.compute_score("1", " , ")


@pytest.mark.parametrize(
    ("response", "score"),
    [("47", 1.0), (" 47", 1.0), ("47 because 12+35", 1.0), ("470", 0.0), ("4", 0.0), ("the answer is 47", 0.0)],
)
def test_addition(response, score):
    assert addition.compute_score(response, "47") == score


def test_addition_rejects_non_integer_ground_truth():
    with pytest.raises(ValueError, match="addition ground_truth must be an integer string, got 'x'"):
        addition.compute_score("1", "x")


def test_tool_calc_uses_last_number():
    call = '<tool_call>{"name": "calculator", "arguments": {"expr": "23*17"}}</tool_call>'
    assert tool_calc.compute_score(call + "391", "391") == 1.0
    assert tool_calc.compute_score(call, "391") == 0.0  # the operands are not the answer
    assert tool_calc.compute_score("-5", "-5") == 1.0
    assert tool_calc.compute_score("no number", "5") == 0.0


@pytest.mark.parametrize(
    ("response", "method", "score"),
    [
        ("so 999+1=1000\n#### 1000", "strict", 1.0),
        ("#### 1,000", "strict", 1.0),
        ("#### $1,000", "strict", 1.0),
        ("#### 5 then #### 1000", "strict", 1.0),  # the last marked answer counts
        ("the answer is 1000", "strict", 0.0),  # no "####": the format is part of the grade
        ("the answer is 1000", "flexible", 1.0),
        ("1000 apples, or maybe 999.", "flexible", 0.0),
        ("#### 999", "strict", 0.0),
        ("nothing here", "flexible", 0.0),
    ],
)
def test_gsm8k(response, method, score):
    assert gsm8k.compute_score(response, "1000", method=method) == score


def test_gsm8k_format_score_and_tail_window():
    assert gsm8k.compute_score("#### 3", "4", format_score=0.1) == 0.1
    assert gsm8k.compute_score("#### 4" + "x" * 400, "4") == 0.0  # only the last 300 characters are searched
    assert gsm8k.extract_solution("-3.5 is it", method="flexible") == "-3.5"
    with pytest.raises(ValueError, match="gsm8k method must be one of .*'loose'"):
        gsm8k.extract_solution("#### 1", method="loose")


def test_last_boxed_extraction():
    assert math_light.last_boxed_only_string(r"a \boxed{1} b \boxed{\frac{1}{2}} c") == r"\boxed{\frac{1}{2}}"
    assert math_light.last_boxed_only_string(r"\fbox{3}") == r"\fbox{3}"
    assert math_light.last_boxed_only_string(r"$\boxed 5$") == r"\boxed 5"
    assert math_light.last_boxed_only_string(r"\boxed{unclosed") is None
    assert math_light.last_boxed_only_string("no box") is None
    assert math_light.remove_boxed(r"\boxed{x^{2}}") == "x^{2}"
    with pytest.raises(ValueError, match="not a boxed expression"):
        math_light.remove_boxed("x")


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\frac12", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        ("-2/4", r"-\frac{1}{2}"),
        ("1,000", "1000"),
        (".5", "0.5"),
        (r"x = 3", "3"),
        (r"90^\circ", "90"),
        (r"5 \text{ cm}", "5"),
        (r"\$10", "10"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"\sqrt2", r"\sqrt{2}"),
        ("50\\%", "50"),
    ],
)
def test_math_equivalent_forms(answer, truth):
    assert math_light.is_equiv(answer, truth)
    assert math_light.compute_score(rf"so \boxed{{{answer}}}", truth) == 1.0


@pytest.mark.parametrize(("answer", "truth"), [("3", "4"), (r"\frac{1}{3}", "0.33"), ("(1,2)", "(2,1)"), ("x+1", "x")])
def test_math_different_answers(answer, truth):
    assert not math_light.is_equiv(answer, truth)
    assert math_light.compute_score(rf"\boxed{{{answer}}}", truth) == 0.0


def test_math_needs_a_boxed_answer_and_accepts_boxed_truth():
    assert math_light.compute_score("the answer is 3", "3") == 0.0
    assert math_light.compute_score(r"\boxed{3}", r"\boxed{3}") == 1.0
    assert math_light.compute_score(r"\boxed{\frac{1}{0}}", "1") == 0.0  # division by zero is not a number


def test_math_verify_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` fail
    with pytest.raises(ImportError, match=r"pip install verl\[math\]"):
        mv_scorer.compute_score(r"\boxed{1}", "1")
    with pytest.raises(ImportError, match=r"pip install verl\[math\]"):
        default_compute_score("lighteval/MATH", r"\boxed{1}", "1", math_backend="math_verify")


def test_math_verify_wiring_with_a_stub(monkeypatch):
    seen = []

    def parse(text):
        seen.append(text)
        return [text.replace(r"\boxed{", "").rstrip("}")]

    def verify(gold, answer):
        if answer == ["boom"]:
            raise RuntimeError("timeout")
        return gold == answer

    monkeypatch.setitem(sys.modules, "math_verify", types.SimpleNamespace(parse=parse, verify=verify))
    assert mv_scorer.compute_score(r"\boxed{2}", "2") == 1.0
    assert seen[0] == r"\boxed{2}"  # a bare ground truth is boxed so it parses as LaTeX
    assert mv_scorer.compute_score(r"\boxed{3}", "2") == 0.0
    assert mv_scorer.compute_score("boom", "2", timeout_score=-1.0) == -1.0


def test_math_verify_real_package_if_installed():
    pytest.importorskip("math_verify")
    assert mv_scorer.compute_score(r"so $\boxed{\frac{2}{4}}$", r"\frac{1}{2}") == 1.0
    assert mv_scorer.compute_score(r"so $\boxed{3}$", "4") == 0.0


@pytest.mark.parametrize(
    ("data_source", "response", "truth"),
    [
        ("synthetic/target_digit", "33333333", "33333333"),
        ("synthetic/arith_seq", "5,7,9", "5,7,9"),
        ("synthetic/addition", "12", "12"),
        ("synthetic/tool_calc", "it is 12", "12"),
        ("synthetic/tool_mul3", "47*6 is 282", "282"),
        ("openai/gsm8k", "#### 12", "12"),
        ("lighteval/MATH", r"\boxed{12}", "12"),
        ("DigitalLearningGmbH/MATH-lighteval", r"\boxed{12}", "12"),
        ("HuggingFaceH4/MATH-500", r"\boxed{12}", "12"),
        ("aime2024", r"\boxed{12}", "12"),
    ],
)
def test_dispatch(data_source, response, truth):
    assert default_compute_score(data_source, response, truth, extra_info={"index": 0}) == 1.0
    assert default_compute_score(data_source, "wrong", truth) == 0.0


def test_dispatch_options_and_ignored_kwargs():
    assert default_compute_score("openai/gsm8k", "it is 12", "12") == 0.0
    assert default_compute_score("openai/gsm8k", "it is 12", "12", gsm8k_method="flexible") == 1.0
    assert default_compute_score("synthetic/addition", "12", "12", sandbox_fusion_url=None) == 1.0
    with pytest.raises(ValueError, match="math_backend must be one of .*'sympy'"):
        default_compute_score("lighteval/MATH", r"\boxed{1}", "1", math_backend="sympy")


def test_unknown_data_source_names_it_and_the_known_ones():
    with pytest.raises(NotImplementedError, match=r"data_source='my/data'.*synthetic/target_digit.*openai/gsm8k"):
        default_compute_score("my/data", "x", "y")
    with pytest.raises(NotImplementedError, match="synthetic/nope"):
        default_compute_score("synthetic/nope", "x", "y")
    with pytest.raises(TypeError, match="data_source must be a str, got NoneType"):
        default_compute_score(None, "x", "y")
