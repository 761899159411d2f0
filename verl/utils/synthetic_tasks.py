"""Synthetic tasks small enough for the tiny model to learn on a CPU, written as verl-format rows.

Each task turns a ``random.Random`` into one ``Example`` (question, answer, task parameters). ``make_rows`` wraps
examples into the row format every verl data set uses, so the trainer reads them like gsm8k:

    data_source: "synthetic/<task>"            # selects the scorer in verl.utils.reward_score
    prompt: [{"role": "user", "content": question}]
    ability: str
    reward_model: {"style": "rule", "ground_truth": answer}
    extra_info: {"split", "index", "task", "question", "answer"}   # question/answer also feed SFT warm starts

The single-turn tasks share one ``extra_info`` schema, so their parquet files can be concatenated.
A task with a ``warm_answer`` also names the answers a short supervised warm start trains on
(``verl.utils.warm_start``), for tasks that RL should start from a checkpoint knowing their format.
The tool tasks (``tool_calc``, ``tool_mul``, ``tool_mul3``) add ``need_tools_kwargs``/``tools_kwargs`` and an
``agent_name`` column for the multi-turn tool agent.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DATA_SOURCE_PREFIX = "synthetic/"

TARGET_DIGIT_LENGTH = 8
ARITH_SEQ_SHOWN = 3
ARITH_SEQ_NEXT = 3
TOOL_NAME = "calculator"
TOOL_AGENT_NAME = "tool_agent"


@dataclass(frozen=True)
class Example:
    question: str
    answer: str


@dataclass(frozen=True)
class TaskSpec:
    name: str
    ability: str
    make: Callable[[random.Random], Example]
    description: str
    # the answer a supervised warm start is trained on for an example (None: the task starts from random init)
    warm_answer: Callable[[random.Random, Example], str] | None = None

    @property
    def data_source(self) -> str:
        return DATA_SOURCE_PREFIX + self.name


def target_digit(rng: random.Random) -> Example:
    """``"7="`` -> ``"77777777"``: repeat the digit; learnable by GRPO from random init."""
    digit = str(rng.randrange(10))
    return Example(question=f"{digit}=", answer=digit * TARGET_DIGIT_LENGTH)


def arith_seq(rng: random.Random) -> Example:
    """``"2,5,8,"`` -> ``"11,14,17"``: continue an arithmetic sequence by three terms."""
    start, step = rng.randrange(10), rng.randrange(1, 6)
    terms = [start + step * i for i in range(ARITH_SEQ_SHOWN + ARITH_SEQ_NEXT)]
    shown = "".join(f"{t}," for t in terms[:ARITH_SEQ_SHOWN])
    return Example(question=shown, answer=",".join(str(t) for t in terms[ARITH_SEQ_SHOWN:]))


def addition(rng: random.Random) -> Example:
    """``"12+35="`` -> ``"47"``: add two numbers below 50."""
    a, b = rng.randrange(50), rng.randrange(50)
    return Example(question=f"{a}+{b}=", answer=str(a + b))


def tool_calc(rng: random.Random) -> Example:
    """``"What is 23*17?"`` -> ``"391"``: meant to be solved by calling the calculator tool."""
    op = rng.choice("+-*")
    a, b = rng.randrange(10, 100), rng.randrange(10, 100)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Example(question=f"What is {a}{op}{b}?", answer=str(value))


def tool_mul(rng: random.Random) -> Example:
    """``"What is 47*6?"`` -> ``"282"``: a 2-digit times a 1-digit number, for the calculator tool.

    Fewer digits to copy into the call and back out of the tool's answer than ``tool_calc``, so the tiny model learns
    to use the tool within minutes of CPU time, while its direct guesses stay mostly wrong (720 distinct products).
    """
    a, b = rng.randrange(10, 100), rng.randrange(2, 10)
    return Example(question=f"What is {a}*{b}?", answer=str(a * b))


def tool_mul3(rng: random.Random) -> Example:
    """``"What is 47*6?"`` -> ``"282"`` with fixed widths: always 2 digits times 1 digit, always a 3-digit product.

    The tiny tokenizer spells one token per character and the prompt is otherwise fixed, so every copy the tool path
    needs (question operands into the call, the tool's answer into the final turn) is a copy from a fixed relative
    offset (``tool_mul``'s products have 2 or 3 digits, so its answer copy is not). The tiny model learns both copies
    within ~1500 SFT steps (docs/tools.md, "Demo"). Rejection sampling keeps the pairs uniform over the 2-digit x
    1-digit pairs with a product of at least 100.
    """
    while True:
        a, b = rng.randrange(10, 100), rng.randrange(2, 10)
        if a * b >= 100:
            return Example(question=f"What is {a}*{b}?", answer=str(a * b))


LONG_TAIL_MIN_REPEATS = 2
LONG_TAIL_MAX_REPEATS = 256
LONG_TAIL_CHARSET = "0123456789x:"  # every character the long-tail prompts and answers use


def long_tail(rng: random.Random) -> Example:
    """``"7x37:"`` -> 37 sevens: the prompt says how long the answer is, and the lengths asked for are log-uniform
    between 2 and 256 (median 23), so most answers are short and a few run to the limit, as reasoning rollouts do."""
    digit = str(rng.randrange(10))
    ratio = LONG_TAIL_MAX_REPEATS / LONG_TAIL_MIN_REPEATS
    repeats = round(LONG_TAIL_MIN_REPEATS * ratio ** rng.random())
    return Example(question=f"{digit}x{repeats}:", answer=digit * repeats)


def long_tail_digit_warm_answer(rng: random.Random, example: Example) -> str:
    """The asked length in a random digit: a warm start on these learns when to stop (the long tail) but not which
    digit to write, which is left for RL to learn (reward about 0.06 at the start; once the digit is learned, up to
    how well the warm start matches the asked lengths)."""
    return str(rng.randrange(10)) * len(example.answer)


TOOL_TASKS = ("tool_calc", "tool_mul", "tool_mul3")

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("target_digit", "pattern", target_digit, '"7=" -> "77777777" (repeat the digit 8 times)'),
        TaskSpec("arith_seq", "math", arith_seq, '"2,5,8," -> "11,14,17" (next 3 terms)'),
        TaskSpec("addition", "math", addition, '"12+35=" -> "47" (operands below 50)'),
        TaskSpec("long_tail", "pattern", long_tail, '"7x37:" -> 37 sevens (lengths log-uniform in 2..256)'),
        TaskSpec(
            "long_tail_digit",
            "pattern",
            long_tail,
            '"7x37:" -> 37 sevens, RL from a warm start that writes the asked length in a random digit',
            long_tail_digit_warm_answer,
        ),
        TaskSpec("tool_calc", "math", tool_calc, '"What is 23*17?" -> "391" (multi-turn, calculator tool)'),
        TaskSpec("tool_mul", "math", tool_mul, '"What is 47*6?" -> "282" (multi-turn, calculator tool)'),
        TaskSpec(
            "tool_mul3", "math", tool_mul3, '"What is 47*6?" -> "282" (fixed widths: 3-digit products; calculator)'
        ),
    )
}


def get_task(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ValueError(f"unknown synthetic task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name]


def _split_rng(seed: int, split: str) -> random.Random:
    # A string seed is hashed deterministically (not with Python's salted hash), so runs are reproducible.
    return random.Random(f"verl-synthetic-{seed}-{split}")


def make_row(spec: TaskSpec, example: Example, split: str, index: int) -> dict:
    """One verl-format row for ``example``."""
    row = {
        "data_source": spec.data_source,
        "prompt": [{"role": "user", "content": example.question}],
        "ability": spec.ability,
        "reward_model": {"style": "rule", "ground_truth": example.answer},
        "extra_info": {
            "split": split,
            "index": index,
            "task": spec.name,
            "question": example.question,
            "answer": example.answer,
        },
    }
    if spec.name in TOOL_TASKS:
        row["agent_name"] = TOOL_AGENT_NAME
        row["extra_info"]["need_tools_kwargs"] = True
        row["extra_info"]["tools_kwargs"] = {TOOL_NAME: {"create_kwargs": {"ground_truth": example.answer}}}
    return row


def make_rows(task: str, size: int, seed: int = 0, split: str = "train") -> list[dict]:
    """``size`` rows of ``task``; the same (task, size, seed, split) always gives the same rows."""
    spec = get_task(task)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    rng = _split_rng(seed, split)
    return [make_row(spec, spec.make(rng), split, i) for i in range(size)]


def make_warm_start_pairs(task: str, size: int, seed: int = 0) -> list[tuple[str, str]]:
    """``size`` (question, warm-start answer) pairs of a task with a ``warm_answer``, from a split of their own."""
    spec = get_task(task)
    if spec.warm_answer is None:
        raise ValueError(f"synthetic task {task!r} has no warm-start answers")
    rng = _split_rng(seed, "warm_start")
    pairs = []
    for _ in range(size):
        example = spec.make(rng)
        pairs.append((example.question, spec.warm_answer(rng, example)))
    return pairs


def write_rows(rows: list[dict], path: str | os.PathLike) -> Path:
    """Write rows to one parquet file (nested columns stay structs/lists, as `datasets` expects)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"refusing to write an empty parquet file to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # written beside and renamed into place: a process reading the file meanwhile (another run preparing the same
    # cached data set) sees the old file or the whole new one, never half of it
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    pq.write_table(pa.Table.from_pylist(rows), partial)
    os.replace(partial, path)
    return path


def write_task_files(
    task: str, local_dir: str | os.PathLike, train_size: int, test_size: int, seed: int = 0
) -> dict[str, Path]:
    """Write ``local_dir/train.parquet`` and ``local_dir/test.parquet``; return {"train": path, "test": path}."""
    if train_size <= 0 or test_size <= 0:
        raise ValueError(f"train_size and test_size must be positive, got {train_size} and {test_size}")
    local_dir = Path(local_dir)
    return {
        split: write_rows(make_rows(task, size, seed, split), local_dir / f"{split}.parquet")
        for split, size in (("train", train_size), ("test", test_size))
    }
