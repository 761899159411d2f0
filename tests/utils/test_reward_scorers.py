"""verl's named reward scorers: math_dapo, prime_math, geo3k, batched math, code tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from verl.utils.reward_score import (
    default_compute_score,
    geo3k,
    math_batch,
    math_dapo,
    prime_code,
    prime_math,
    sandbox_fusion,
)
from verl.utils.reward_score.code_tests import extract_code, outputs_match


@pytest.mark.parametrize(
    ("response", "truth", "score", "pred"),
    [
        ("so the answer is \\boxed{42}", "42", 1.0, "42"),
        ("work...\nAnswer: $\\frac12$", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
        ("Answer: 1,000 dollars", "1000", 1.0, "1000"),
        ("Answer: x = 5 cm", "5", 1.0, "5"),
        ("Answer: 7", "8", -1.0, "7"),
        ("nothing", "8", -1.0, "[INVALID]"),
    ],
)
def test_math_dapo(response, truth, score, pred):
    result = math_dapo.compute_score(response, truth)
    assert result == {"score": score, "acc": score > 0, "pred": pred}


def test_math_dapo_helpers():
    assert math_dapo.last_boxed_only_string("a \\boxed{1} b \\boxed{{2}}") == "\\boxed{{2}}"
    assert math_dapo.remove_boxed("\\boxed{x}") == "x"
    assert math_dapo.verify("\\boxed{3}", "3", strict_box_verify=True) == (True, "3")
    with pytest.raises(AssertionError):
        math_dapo.remove_boxed("x")


@pytest.mark.parametrize(
    ("response", "truth", "correct"),
    [
        ("The answer is \\boxed{\\frac{1}{2}}", "0.5", True),
        ("so x = 3", "3", True),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
        ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
        ("\\boxed{(1, 2)}", "(1,2)", True),
        ("\\boxed{[1,2)}", "(1,2)", False),
        ("\\boxed{7}", "8", False),
        ("\\boxed{2\\pi}", "6.2832", True),
        ("The answer is 12 degrees", "12", True),
    ],
)
def test_prime_math(response, truth, correct):
    assert prime_math.compute_score(response, truth)[0] is correct


def test_prime_math_format_flag_and_unreduced_fraction():
    assert prime_math.compute_score("Step 2: so \\boxed{5}", "5")[1] is True
    assert prime_math.grade_answer("\\frac{2}{4}", "\\frac{1}{2}") is False  # fractions are held to their form


def test_search_r1_exact_match():
    from verl.utils.reward_score import search_r1_like_qa_em as qa

    truth = {"target": ["Paris", "City of Light"]}
    assert qa.compute_score("<answer>The Paris.</answer>", truth) == 1.0
    assert qa.compute_score("<answer>x</answer> then <answer>city of light</answer>", truth) == 1.0  # the last one
    assert qa.compute_score("<answer>London</answer>", truth, format_score=0.1) == 0.1
    assert qa.compute_score("Paris", truth) == 0
    assert qa.compute_score("<answer>paris</answer>" * 11, truth) == 0.25  # answer spamming
    assert qa.compute_score_subem("<answer>it is paris, france</answer>", truth) == 1.0
    assert qa.em_check("an apple", "Apple") == 1 and qa.subem_check("pear", ["apple"]) == 0


def test_geo3k_and_batched_math():
    assert geo3k.compute_score("<think>angles</think> so \\boxed{30}", "30") == pytest.approx(1.0)
    assert geo3k.compute_score("\\boxed{30}", "30") == pytest.approx(0.9)
    assert geo3k.compute_score("<think>x</think> \\boxed{31}", "30") == pytest.approx(0.1)
    assert math_batch.compute_score_batched(["m", "m"], ["\\boxed{1}", "\\boxed{2}"], ["1", "1"], [None, None]) == [
        1.0,
        0.0,
    ]


ADD = {"inputs": ["1 2\n", "3 4\n", "10 -5\n"], "outputs": ["3\n", "7\n", "5\n"]}
GOOD = "Here is my solution:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"


def test_code_extraction_and_output_matching():
    assert extract_code(GOOD).strip().endswith("print(a + b)")
    assert extract_code("```\nprint(1)\n```") == "\nprint(1)\n"
    assert extract_code("```cpp\nint main(){}\n```") == "int main(){}\n"
    assert extract_code("no code") is None
    assert outputs_match("3 \n4\n\n", "3\n4", call_based=False)
    assert outputs_match("0.3333333", "0.33333333", call_based=False)
    assert outputs_match("[1, 2]\n", [[1, 2]], call_based=True)
    assert not outputs_match("[1, 2]\n", [[2, 1]], call_based=True)


def test_prime_code_runs_in_the_local_sandbox():
    assert prime_code.compute_score(GOOD, json.dumps(ADD))[0] is True
    score, metadata = prime_code.compute_score(WRONG, ADD)
    assert score is False and metadata[0]["status"] == "wrong_answer" and len(metadata) == 1  # stops early
    assert prime_code.compute_score(WRONG, ADD, continuous=True)[0] == 0.0
    calls = {"fn_name": "add", "inputs": [[1, 2], [5, 6]], "outputs": [[3], [11]]}
    assert (
        prime_code.compute_score(
            "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```", calls
        )[0]
        is True
    )
    crash = prime_code.compute_score("```python\nprint(1/0)\n```", ADD, continuous=True)
    assert crash[0] == 0.0 and crash[1][0]["status"] == "runtime_error"
    assert prime_code.compute_score(GOOD, {"inputs": ["1"]})[1][0]["error"].startswith("test cases must")


class _FakeSandboxFusion(BaseHTTPRequestHandler):
    """Answers /run_code by evaluating the one program shape the test sends: 'print(<int>)'."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        code = body["code"].strip()
        if code.startswith("print(") and code[6:-1].isdigit():
            answer = {
                "status": "Success",
                "run_result": {"status": "Finished", "stdout": code[6:-1] + "\n", "return_code": 0},
            }
        else:
            answer = {
                "status": "Failed",
                "run_result": {"status": "Finished", "stdout": "", "stderr": "boom", "return_code": 1},
            }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def sandbox_url():
    server = HTTPServer(("127.0.0.1", 0), _FakeSandboxFusion)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/run_code"
    server.shutdown()


def test_sandbox_fusion_client(sandbox_url):
    cases = {"inputs": ["", ""], "outputs": ["7", "8"]}
    score, metadata = sandbox_fusion.compute_score(
        sandbox_url, threading.Semaphore(2), 256, "```python\nprint(7)\n```", cases
    )
    assert score == 0.5 and [m["status"] for m in metadata] == ["success", "wrong_answer"]
    score, metadata = sandbox_fusion.compute_score(sandbox_url, None, 256, "```python\nraise SystemExit(1)\n```", cases)
    assert score == 0.0 and metadata[0]["status"] == "runtime_error"
    assert sandbox_fusion.compute_score(sandbox_url, None, 256, "print(7)", cases) == (
        0.0,
        [{"error": "the completion has no fenced code block"}],
    )
    dead = sandbox_fusion.compute_score("http://127.0.0.1:9/run_code", None, 256, "```python\nprint(7)\n```", cases)
    assert dead[0] == 0.0 and dead[1][0]["status"] == "api_error"


def test_dispatcher_routes_verl_data_sources(sandbox_url):
    assert default_compute_score("numina_olympiads", "\\boxed{1/2}", "\\frac{1}{2}") == 1.0
    assert default_compute_score("hiyouga/geometry3k", "<think>x</think>\\boxed{3}", "3") == pytest.approx(1.0)
    assert default_compute_score("searchR1_nq", "<answer>Paris</answer>", {"target": ["paris"]}) == 1.0
    assert (
        default_compute_score(
            "apps", "```python\nprint(7)\n```", {"inputs": [""], "outputs": ["7"]}, sandbox_fusion_url=sandbox_url
        )
        == 1.0
    )
    assert default_compute_score("taco", GOOD, ADD) == 1.0  # local sandbox without a URL
