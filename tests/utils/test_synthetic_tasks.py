import importlib.util
import operator
import random
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl.utils import synthetic_tasks as st
from verl.utils.reward_score import default_compute_score

REPO_ROOT = Path(__file__).resolve().parents[2]
SINGLE_TURN = ("target_digit", "arith_seq", "addition", "long_tail", "long_tail_digit")
GARBAGE = "zz"


@pytest.mark.parametrize("task", sorted(st.TASKS))
def test_rows_have_verl_format(task):
    rows = st.make_rows(task, 20, seed=1, split="train")
    assert len(rows) == 20
    for i, row in enumerate(rows):
        assert row["data_source"] == f"synthetic/{task}"
        assert row["prompt"] == [{"role": "user", "content": row["extra_info"]["question"]}]
        assert isinstance(row["ability"], str) and row["ability"]
        assert row["reward_model"] == {"style": "rule", "ground_truth": row["extra_info"]["answer"]}
        assert row["extra_info"]["split"] == "train"
        assert row["extra_info"]["index"] == i
        assert row["extra_info"]["task"] == task


@pytest.mark.parametrize("task", sorted(st.TASKS))
def test_ground_truth_scores_one_and_garbage_zero(task):
    for row in st.make_rows(task, 50, seed=2):
        truth = row["reward_model"]["ground_truth"]
        assert default_compute_score(row["data_source"], truth, truth, row["extra_info"]) == 1.0
        assert default_compute_score(row["data_source"], GARBAGE, truth, row["extra_info"]) == 0.0


def test_examples_follow_the_task_definitions():
    rng = random.Random(0)
    for _ in range(30):
        ex = st.target_digit(rng)
        digit = ex.question[0]
        assert ex.question == f"{digit}=" and ex.answer == digit * 8
        ex = st.addition(rng)
        a, b = ex.question.rstrip("=").split("+")
        assert int(ex.answer) == int(a) + int(b) and int(a) < 50 and int(b) < 50
        ex = st.arith_seq(rng)
        terms = [int(t) for t in ex.question.rstrip(",").split(",") + ex.answer.split(",")]
        assert len(terms) == 6
        steps = {b - a for a, b in zip(terms, terms[1:])}
        assert len(steps) == 1 and steps.pop() > 0
        ex = st.tool_calc(rng)
        a, op, b = re.fullmatch(r"What is (\d+)([-+*])(\d+)\?", ex.question).groups()
        assert int(ex.answer) == {"+": operator.add, "-": operator.sub, "*": operator.mul}[op](int(a), int(b))


def test_long_tail_lengths_are_log_uniform_and_long_tailed():
    rows = st.make_rows("long_tail", 4000, seed=0)
    lengths = sorted(len(row["reward_model"]["ground_truth"]) for row in rows)
    for row in rows:
        digit, repeats = re.fullmatch(r"(\d)x(\d+):", row["extra_info"]["question"]).groups()
        assert row["reward_model"]["ground_truth"] == digit * int(repeats)
    assert lengths[0] == st.LONG_TAIL_MIN_REPEATS and lengths[-1] == st.LONG_TAIL_MAX_REPEATS
    median = lengths[len(lengths) // 2]
    assert 18 <= median <= 28  # log-uniform in 2..256: about 23, far under a third of the maximum
    assert sum(n > 128 for n in lengths) / len(lengths) == pytest.approx(1 / 7, abs=0.03)  # the top octave
    assert set("".join(row["extra_info"]["question"] + row["extra_info"]["answer"] for row in rows)) <= set(
        st.LONG_TAIL_CHARSET
    )


def test_long_tail_digit_warm_answers_keep_the_length_and_hide_the_digit():
    """The warm start learns when to stop, not which digit: its answers have the asked length in a digit drawn
    independently of the asked one, so they score about 0.1 and the RL rows stay those of long_tail."""
    assert (
        st.make_rows("long_tail_digit", 50, seed=3)[0]["prompt"] == st.make_rows("long_tail", 50, seed=3)[0]["prompt"]
    )
    pairs = st.make_warm_start_pairs("long_tail_digit", 3000, seed=0)
    assert pairs == st.make_warm_start_pairs("long_tail_digit", 3000, seed=0)
    same_digit = 0
    for question, answer in pairs:
        digit, repeats = re.fullmatch(r"(\d)x(\d+):", question).groups()
        assert len(answer) == int(repeats) and len(set(answer)) == 1
        same_digit += answer[0] == digit
    assert same_digit / len(pairs) == pytest.approx(0.1, abs=0.02)
    with pytest.raises(ValueError, match="no warm-start answers"):
        st.make_warm_start_pairs("long_tail", 1)


def test_tool_mul3_has_fixed_widths_and_covers_its_range():
    rng = random.Random(0)
    pairs = set()
    for _ in range(2000):
        ex = st.tool_mul3(rng)
        a, b = re.fullmatch(r"What is (\d+)\*(\d+)\?", ex.question).groups()
        # fixed widths: every copy the tool path needs is from a fixed offset in the one-token-per-character prompt
        assert len(a) == 2 and len(b) == 1 and len(ex.answer) == 3
        assert int(ex.answer) == int(a) * int(b) and 2 <= int(b) <= 9
        pairs.add((int(a), int(b)))
    eligible = {(a, b) for a in range(10, 100) for b in range(2, 10) if a * b >= 100}
    assert pairs <= eligible and len(pairs) > 0.9 * len(eligible)
    rows = st.make_rows("tool_mul3", 5, seed=0)
    assert all(row["agent_name"] == st.TOOL_AGENT_NAME for row in rows)
    assert {len(row["extra_info"]["question"]) for row in rows} == {len("What is 47*6?")}


def test_rows_are_deterministic_and_splits_differ():
    assert st.make_rows("addition", 30, seed=5) == st.make_rows("addition", 30, seed=5)
    train = [r["extra_info"]["question"] for r in st.make_rows("addition", 30, seed=5, split="train")]
    test = [r["extra_info"]["question"] for r in st.make_rows("addition", 30, seed=5, split="test")]
    other_seed = [r["extra_info"]["question"] for r in st.make_rows("addition", 30, seed=6, split="train")]
    assert train != test and train != other_seed


def test_tool_calc_rows_carry_tool_kwargs():
    row = st.make_rows("tool_calc", 1)[0]
    assert row["agent_name"] == st.TOOL_AGENT_NAME
    assert row["extra_info"]["need_tools_kwargs"] is True
    truth = row["reward_model"]["ground_truth"]
    assert row["extra_info"]["tools_kwargs"] == {st.TOOL_NAME: {"create_kwargs": {"ground_truth": truth}}}


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown synthetic task 'nope'; known tasks: .*addition"):
        st.make_rows("nope", 3)
    with pytest.raises(ValueError, match="size must be a non-negative int, got -1"):
        st.make_rows("addition", -1)
    with pytest.raises(ValueError, match="train_size and test_size must be positive, got 0 and 3"):
        st.write_task_files("addition", "/nonexistent-dir-not-created", 0, 3)


def test_single_turn_tasks_share_one_schema(tmp_path):
    schemas = []
    for task in SINGLE_TURN:
        paths = st.write_task_files(task, tmp_path / task, train_size=4, test_size=2, seed=0)
        schemas.append(pq.read_schema(paths["train"]))
    assert all(s.equals(schemas[0]) for s in schemas)


def test_cli_writes_train_and_test_parquet(tmp_path, capsys):
    args = ["--task", "target_digit", "--local_dir", str(tmp_path), "--train_size", "16", "--test_size", "4"]
    _load_cli().main([*args, "--seed", "3"])
    assert f"train: {tmp_path / 'train.parquet'}" in capsys.readouterr().out
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert (len(train), len(test)) == (16, 4)
    assert train == st.make_rows("target_digit", 16, seed=3, split="train")
    assert {r["extra_info"]["split"] for r in test} == {"test"}


def _load_cli():
    spec = importlib.util.spec_from_file_location("synthetic_cli", REPO_ROOT / "examples/data_preprocess/synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    cli = _load_cli()
    with pytest.raises(SystemExit) as exc:
        cli.main(["--task", "nope", "--local_dir", str(tmp_path)])
    assert exc.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["--task", "addition", "--local_dir", str(tmp_path), "--train_size", "0"])
    assert exc.value.code == 2 and "train_size and test_size must be positive" in capsys.readouterr().err
    cli.main(["--task", "addition", "--local_dir", str(tmp_path), "--train_size", "3", "--test_size", "1"])
    assert "train: " in capsys.readouterr().out
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 3


def test_rows_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    paths = st.write_task_files("arith_seq", tmp_path, train_size=8, test_size=2, seed=0)
    ds = datasets.load_dataset("parquet", data_files={"train": str(paths["train"])})["train"]
    assert len(ds) == 8
    assert ds[0]["prompt"][0]["role"] == "user"
    assert ds[0]["reward_model"]["ground_truth"] == st.make_rows("arith_seq", 1)[0]["reward_model"]["ground_truth"]
