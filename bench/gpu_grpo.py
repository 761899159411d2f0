"""GPU: one whole GRPO step, our colocated ``main_ppo`` against TRL's ``GRPOTrainer`` on the same GPU.

Run on a machine with a CUDA device (never in CI); without one it prints why and exits 0 without writing anything.
``--smoke`` runs both sides on CPU with a tiny shape so the script cannot rot unnoticed (numbers mean nothing; files
are written only to ``--out-dir`` when given).

Both sides get the same:

- checkpoint: random weights in Qwen2.5-0.5B's shape (494M parameters, 152k vocabulary, tied embeddings), saved
  once in bf16 to a temporary folder with a tokenizer from ``verl.utils.tiny_model.build_tokenizer`` (one token per
  character: the task's 12 characters, then filler characters up to the vocabulary size). The architecture is
  ``llama`` with q/k/v/o biases, not ``qwen2``: for ``qwen2`` folders ``AutoTokenizer`` swaps in Qwen2's byte-level
  tokenizer class, which breaks a character-level vocabulary. The shape, FLOPs and kernels are Qwen2.5-0.5B's (plus an
  o_proj bias of 896 values a layer);
- prompts: ``<digit><ticks>=`` rows (chat template of the tiny kit), 8 per step by default, every step the same
  multiset of lengths asked for, log-spaced from ``--min-length`` to ``--response-length`` (1024), so the lengths are
  long-tailed (log-uniform: most short, one per step near the limit) and both sides see the same steps (no shuffle);
- stopping: EOS is honoured, and the random checkpoint is wired to emit it after the asked length. Random weights
  alone would almost never sample EOS (one token in 152k), so every response would run to the limit. Three residual
  channels are set aside: a constant (every token's embedding), a tick count (the tick character's embedding) and a
  clock that layer 0 writes: one KV head with zero keys attends uniformly over the prefix and averages the tick
  channel, so at position t the clock holds ``ticks / (t + 1)`` (times a constant), falling as the response grows. No
  other layer writes to these channels. EOS's output row compares the clock with the constant, so its logit crosses
  the rest of the vocabulary when the clock falls to ``1 / CLOCK_RATIO`` of the tick value, i.e. after
  ``ticks * (CLOCK_RATIO - 1) - (the other prompt tokens)`` response tokens; its slope makes the stop soft (a few
  tokens' spread), so the samples of a group differ. The crossing point is calibrated on the saved weights (one
  forward over each step's prompts followed by filler tokens) and the expected length of every prompt is checked and
  reported. With the learning rate of 1e-6 the updates do not move it;
- reward: ``compute_score`` below, ``1 - |length - asked| / max(length, asked)`` with the length in tokens read off
  the response text (one character per token, plus EOS), called by our reward manager
  (``reward.custom_reward_function``) and by TRL as its reward function;
- group size (``--n`` 8), prompts per step, response limit, sampling (temperature 1, no top-k/top-p), GRPO with
  group-std advantages, clip ratio 0.2, no KL, token-mean loss, one optimizer step per batch (so neither side runs a
  separate old-log-prob pass: both treat the update as on-policy), AdamW lr 1e-6, betas (0.9, 0.999), weight decay
  0.01, grad clip 1.0, constant schedule, float32 master weights with bf16 compute, no gradient checkpointing
  (TRL's default is on; turned off as ours is), micro-batches of ``--micro-batch`` samples (ours cuts them in length
  order; TRL's per-device batch with gradient accumulation, its generation batch padded to its longest sample).

Sides, each in its own subprocess, one after the other in ``--sides`` order (ours first by default):

- ours: ``python -m verl.trainer.main_ppo`` (one colocated actor+rollout worker, the ``hf`` engine, FSDP2 on one GPU);
  stages from its metrics: ``timing_s/gen``, ``timing_s/old_log_prob``, ``timing_s/update_actor``,
  ``timing_s/update_weights``, ``timing_s/reward``; the step is ``timing_s/step``. Response lengths from
  ``trainer.rollout_data_dir``.
- TRL ``GRPOTrainer`` (``TRL_VERSION``, ``use_vllm=False``: its own ``model.generate`` on the training model, so no
  weight sync; the model loaded in float32, TRL's default, under ``bf16=True`` autocast): the step is timed by a
  callback (``on_step_begin`` to ``on_step_end``, CUDA synchronised), the stages by wrapping the trainer's own
  methods on the instance: generate = ``_generate_single_turn``, log-probs = ``_get_per_token_logps_and_entropies``
  called without grad, reward = ``_calculate_rewards``; update = the step less ``_generate_and_score_completions``
  (forward, backward and optimizer step of every micro-batch). Response lengths from the ``completion_ids`` its
  reward function receives. Skipped (recorded as such) when ``trl`` is not importable.

Reported per side: samples/s over the steps after ``--warmup`` (samples / summed step time), mean seconds per stage,
response lengths, and ours / TRL (target ``TARGET_VS_TRL``). The whole script has ``--budget`` seconds (135, for the
140 s that ``bench/gpu_check.sh`` allows it; ignored by ``--smoke``): a side that would run past it is stopped, one
with under 20 s left is skipped, and a SIGTERM (``timeout``) stops the running side; every side also has
``--side-timeout``. Either way the results are written, with the steps each side logged and its error. Progress lines
go to stderr, so a run cut off still shows how far it got.

    python bench/gpu_grpo.py                   # writes bench/results/gpu_grpo.{json,md}
    python bench/gpu_grpo.py --smoke           # CPU, tiny shape: checks the code path only
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO_ROOT, library_versions, markdown_table  # noqa: E402
from bench.gpu_suite import QWEN25_05B, SMOKE, progress, write_unless_smoke  # noqa: E402

NAME = "gpu_grpo"
TRL_VERSION = "1.16.0"  # the TRL release this script was written against (works with transformers 5.x)
TARGET_VS_TRL = 3.0

LR = 1e-6
BETAS = (0.9, 0.999)
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
CLIP_RATIO = 0.2

DATA_SOURCE = "bench/gpu_grpo"
TASK_CHARS = "0123456789|="  # the prompts' characters; the rest of the vocabulary is filler
TICK = "|"
# residual channels set aside by the length clock (see the module docstring)
CONST, TICKS, CLOCK = 0, 1, 2
CONST_VALUE = 4.0  # every token's embedding in CONST
TICK_VALUE = 4.0  # the tick's embedding in TICKS
CLOCK_RATIO = 9  # EOS once the clock falls to 1/CLOCK_RATIO of a tick: after ticks * CLOCK_RATIO positions in all
SHARPNESS = 200.0  # EOS logit change (nats) between the clock at the threshold and at zero
_SKIPPED_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp", "Zs", "Mn", "Mc", "Me"}

CHILD_FLAG = "--child"


# ---------------------------------------------------------------------------------------------- reward


def length_score(chars: int, asked: int) -> float:
    """1 when the response has the asked number of tokens (EOS included, one character per other token)."""
    tokens = chars + 1
    return 1.0 - abs(tokens - asked) / max(tokens, asked, 1)


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """Our side's scoring function (``reward.custom_reward_function``)."""
    return length_score(len(solution_str), int(ground_truth))


STEP_LENGTHS: list[int] = []  # TRL child: completion lengths (tokens, EOS included) since the step began


def trl_reward(completions: list[Any], reward_model: list[dict], completion_ids: list[list[int]], **_: Any) -> list:
    """The same score as TRL calls reward functions; records each completion's length in tokens."""
    STEP_LENGTHS.extend(len(ids) for ids in completion_ids)
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [length_score(len(text), int(rm["ground_truth"])) for text, rm in zip(texts, reward_model)]


# ---------------------------------------------------------------------------------------------- checkpoint and data


def filler_chars(count: int, taken: str) -> str:
    """``count`` distinct printable characters from U+0100 up, none of ``taken``, no spaces, marks or controls."""
    chars: list[str] = []
    point = 0x100
    while len(chars) < count:
        ch = chr(point)
        point += 1
        if ch in taken or ch.isspace() or unicodedata.category(ch) in _SKIPPED_CATEGORIES:
            continue
        chars.append(ch)
    return "".join(chars)


def build_vocab_tokenizer(vocab_size: int) -> Any:
    """The tiny kit's character-level tokenizer with exactly ``vocab_size`` tokens."""
    from verl.utils.tiny_model import SPECIAL_TOKENS, TOOL_TOKENS, build_tokenizer

    reserved = len(SPECIAL_TOKENS) + len(TOOL_TOKENS) + len(TASK_CHARS)
    tokenizer = build_tokenizer(TASK_CHARS + filler_chars(vocab_size - reserved, TASK_CHARS))
    if len(tokenizer) != vocab_size:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} tokens, the model {vocab_size}")
    return tokenizer


def prompt_content(digit: int, ticks: int) -> str:
    return f"{digit}{TICK * ticks}="


def prompt_tokens(tokenizer: Any, content: str) -> list[int]:
    """The prompt's token ids as both sides build them: chat template with the generation prompt."""
    messages = [{"role": "user", "content": content}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def step_rows(args: argparse.Namespace, tokenizer: Any) -> list[dict]:
    """``args.steps`` blocks of ``args.prompts`` verl-format rows; every block asks for the same lengths.

    A prompt of ``P`` tokens, ``ticks`` of them ticks, stops after ``ticks * CLOCK_RATIO - P + 1`` response tokens
    (EOS included): the clock ``ticks / (P + r)`` reaches ``1 / CLOCK_RATIO`` at response position ``r``."""
    others = len(prompt_tokens(tokenizer, prompt_content(0, 0)))  # every prompt token but the ticks
    rng = random.Random(args.seed)
    rows: list[dict] = []
    for step in range(args.steps):
        block = []
        for i in range(args.prompts):
            wanted = args.min_length * (args.response_length / args.min_length) ** (i / max(args.prompts - 1, 1))
            ticks = max(1, round((others + wanted - 1) / (CLOCK_RATIO - 1)))
            asked = min(ticks * (CLOCK_RATIO - 1) - others + 1, args.response_length)
            block.append((prompt_content(rng.randrange(10), ticks), asked))
        rng.shuffle(block)
        for question, asked in block:
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "prompt": [{"role": "user", "content": question}],
                    "ability": "length",
                    "reward_model": {"style": "rule", "ground_truth": str(asked)},
                    "extra_info": {"split": "train", "index": len(rows), "step": step + 1, "asked": asked},
                }
            )
    return rows


def model_config(shape: dict, tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        **shape,
        rms_norm_eps=1e-6,
        attention_bias=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def wire_clock(model: Any, tick_id: int) -> float:
    """Set aside the CONST, TICKS and CLOCK channels and build the clock in layer 0 (module docstring); returns
    the clock's value per tick at layer 0 (the tick's TICKS value after layer 0's input norm)."""
    import torch

    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    group = config.num_attention_heads // config.num_key_value_heads
    reserved = [CONST, TICKS, CLOCK]
    with torch.no_grad():
        emb = model.get_input_embeddings().weight  # tied: also the output head
        emb[:, reserved] = 0
        emb[:, CONST] = CONST_VALUE
        emb[tick_id, TICKS] = TICK_VALUE
        for layer in model.model.layers:
            for proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
                proj.weight[reserved, :] = 0
                if proj.bias is not None:
                    proj.bias[reserved] = 0
            layer.input_layernorm.weight[reserved] = 1
        first = model.model.layers[0].self_attn
        first.k_proj.weight[:head_dim] = 0  # KV head 0: zero keys, so its query heads attend uniformly
        if first.k_proj.bias is not None:
            first.k_proj.bias[:head_dim] = 0
        first.v_proj.weight[0] = 0
        first.v_proj.weight[0, TICKS] = 1
        if first.v_proj.bias is not None:
            first.v_proj.bias[0] = 0
        for head in range(group):  # the query heads reading KV head 0: only head 0's first dimension, into CLOCK
            first.o_proj.weight[:, head * head_dim] = 0
        first.o_proj.weight[CLOCK, 0] = 1
        model.model.norm.weight[reserved] = 1
        row = emb[tick_id].float()
        return float(TICK_VALUE * torch.rsqrt(row.pow(2).mean() + config.rms_norm_eps))


def _clock_readings(model: Any, sequences: list[tuple[list[int], int]], eos_id: int) -> list[dict]:
    """Per sequence (prompt + filler), at every position that predicts a response token: the final norm's scale
    ``u``, the clock ``x3``, the rest of the vocabulary's log-sum-exp less the common CONST term, and EOS's
    probability."""
    import torch

    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for ids, prompt_len in sequences:
            hidden = model.model(input_ids=torch.tensor([ids], device=device)).last_hidden_state[0]
            logits = model.lm_head(hidden).float()[prompt_len - 1 : -1]
            hidden = hidden.float()[prompt_len - 1 : -1]
            u = hidden[:, CONST] / CONST_VALUE
            rest = logits.clone()
            rest[:, eos_id] = -math.inf
            out.append(
                {
                    "u": u,
                    "x3": hidden[:, CLOCK] / u,
                    "ell": torch.logsumexp(rest, -1) - hidden[:, CONST] * CONST_VALUE,
                    "p_eos": torch.softmax(logits, -1)[:, eos_id],
                }
            )
    return out


def expected_length(p_eos: Any) -> tuple[float, int]:
    """Mean and median response length (tokens, EOS included) when EOS comes with these per-position odds."""
    import torch

    survive = torch.cumprod(1 - p_eos.double(), 0)  # P(no EOS among the first r + 1 tokens)
    mean = 1 + float(survive[:-1].sum())
    below = (survive <= 0.5).nonzero()
    median = int(below[0]) + 1 if len(below) else len(p_eos)
    return mean, median


def calibrate_eos(model: Any, sequences: list[tuple[list[int], int]], eos_id: int, per_tick: float) -> dict:
    """Set EOS's row so its logit crosses the rest of the vocabulary's where the clock is ``1/CLOCK_RATIO`` of a
    tick, from the scale and spread the model shows near that point."""
    import torch

    tau = per_tick / CLOCK_RATIO
    readings = _clock_readings(model, sequences, eos_id)
    near = [(r["x3"] > 0.6 * tau) & (r["x3"] < 1.6 * tau) for r in readings]
    u = torch.cat([r["u"][m] for r, m in zip(readings, near)])
    ell = torch.cat([r["ell"][m] for r, m in zip(readings, near)])
    if u.numel() == 0:
        raise RuntimeError("no position near the clock's threshold: the prompts ask for lengths beyond the limit")
    u_ref, ell_ref = float(u.median()), float(ell.median())
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[eos_id] = 0
        emb[eos_id, CONST] = CONST_VALUE + (SHARPNESS + ell_ref) / (u_ref * CONST_VALUE)
        emb[eos_id, CLOCK] = -SHARPNESS / (u_ref * tau)
    return {
        "per_tick": per_tick,
        "threshold": tau,
        "u_median": u_ref,
        "u_spread": [float(u.min()), float(u.max())],
        "ell_median": ell_ref,
        "eos_const": float(emb[eos_id, CONST].detach()),
        "eos_clock": float(emb[eos_id, CLOCK].detach()),
    }


def build_checkpoint(spec: dict) -> dict:
    """Child: write the checkpoint (bf16 on a GPU), its tokenizer and the parquet rows; returns what it did."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from verl.utils.synthetic_tasks import write_rows

    args = argparse.Namespace(**spec["args"])
    device = torch.device(spec["device"])
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = Path(spec["model_dir"])
    start = time.perf_counter()
    tokenizer = build_vocab_tokenizer(spec["shape"]["vocab_size"])
    config = model_config(spec["shape"], tokenizer)
    torch.manual_seed(args.seed)
    with torch.device(device):  # initialised on the device where transformers honours the context
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.to(device).eval()
    tick_id = tokenizer.convert_tokens_to_ids(TICK)
    per_tick = wire_clock(model, tick_id)
    model.to(dtype)  # calibrate on the weights as saved
    rows = step_rows(args, tokenizer)
    write_rows(rows, spec["data"])
    first_filler = tokenizer.convert_tokens_to_ids(TASK_CHARS[-1]) + 1
    filler_ids = torch.randint(first_filler, len(tokenizer), (args.response_length,)).tolist()
    sequences = []
    for row in rows[: args.prompts]:
        ids = prompt_tokens(tokenizer, row["prompt"][0]["content"])
        sequences.append((ids + filler_ids, len(ids)))
    calibration = calibrate_eos(model, sequences, tokenizer.eos_token_id, per_tick)
    checks = []
    readings = _clock_readings(model, sequences, tokenizer.eos_token_id)
    for row, reading, (_, prompt_len) in zip(rows, readings, sequences):
        mean, median = expected_length(reading["p_eos"])
        checks.append(
            {"prompt_tokens": prompt_len, "asked": row["extra_info"]["asked"], "expected_mean": mean, "median": median}
        )
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    config_path = out / "tokenizer_config.json"  # the generic class: the tiny kit's tokenizer loads as saved
    tok_config = json.loads(config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tok_config, indent=2, sort_keys=True) + "\n")
    prompt_lengths = [len(prompt_tokens(tokenizer, r["prompt"][0]["content"])) for r in rows]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).replace("torch.", ""),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)",
        "calibration": calibration,
        "length_checks": checks,
        "max_prompt_tokens": max(prompt_lengths),
        "asked_per_step": sorted(r["extra_info"]["asked"] for r in rows[: args.prompts]),
        "build_s": time.perf_counter() - start,
    }


# ---------------------------------------------------------------------------------------------- TRL side (child)


def run_trl(spec: dict) -> None:
    """Child: train with ``GRPOTrainer``; appends one JSON line per optimizer step to ``spec['steps_file']``."""
    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    args = argparse.Namespace(**spec["args"])
    cuda = spec["device"] == "cuda"
    steps_file = Path(spec["steps_file"])
    stages: dict[str, float] = {}

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def timed(fn: Any, stage: str, only_without_grad: bool = False) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            if only_without_grad and torch.is_grad_enabled():
                return fn(*a, **kw)
            sync()
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                sync()
                stages[stage] = stages.get(stage, 0.0) + time.perf_counter() - start

        return wrapper

    class StepClock(TrainerCallback):
        start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            sync()
            stages.clear()
            STEP_LENGTHS.clear()
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            sync()
            step_s = time.perf_counter() - self.start
            record = {"step": state.global_step, "step_s": step_s, **stages}
            record["lengths"] = list(STEP_LENGTHS)
            with steps_file.open("a") as handle:
                handle.write(json.dumps(record) + "\n")

    dataset = load_dataset("parquet", data_files=spec["data"], split="train").select_columns(["prompt", "reward_model"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    samples = args.prompts * args.n
    with tempfile.TemporaryDirectory(prefix="bench_gpu_grpo_trl_") as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=not cuda,
            bf16=cuda,
            seed=args.seed,
            max_steps=args.steps,
            per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=samples // args.micro_batch,
            num_iterations=1,
            num_generations=args.n,
            max_completion_length=args.response_length,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            epsilon=CLIP_RATIO,
            loss_type="dapo",
            scale_rewards="group",
            learning_rate=LR,
            adam_beta1=BETAS[0],
            adam_beta2=BETAS[1],
            weight_decay=WEIGHT_DECAY,
            max_grad_norm=GRAD_CLIP,
            lr_scheduler_type="constant",
            warmup_steps=0,
            gradient_checkpointing=False,
            shuffle_dataset=False,
            use_vllm=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=spec["model_dir"],
            reward_funcs=trl_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepClock()],
        )
        trainer._generate_single_turn = timed(trainer._generate_single_turn, "generate")
        trainer._get_per_token_logps_and_entropies = timed(
            trainer._get_per_token_logps_and_entropies, "log_probs", only_without_grad=True
        )
        trainer._calculate_rewards = timed(trainer._calculate_rewards, "reward")
        trainer._generate_and_score_completions = timed(trainer._generate_and_score_completions, "gen_and_score")
        trainer.train()


# ---------------------------------------------------------------------------------------------- sides (parent)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSON-lines file a child is still writing (a torn last line is left for later)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


class Cut(Exception):
    """The script got SIGTERM (a time limit such as ``timeout``'s): stop the running side and write what it has."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Cut()


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """Interrupt the child's process group (it cleans up, Ray included), then kill it if it lingers."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(side: str, cmd: list[str], records_file: Path, log: Path, timeout: float, report: Any) -> dict:
    """Run one side's process for at most ``timeout`` seconds, reporting each record it logs as it comes; returns
    its records and outcome (``cut``: the script got SIGTERM meanwhile)."""
    start = time.perf_counter()
    seen = 0
    stopped = None
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while True:
                done = proc.poll() is not None
                records = _read_jsonl(records_file)
                for record in records[seen:]:
                    report(record)
                seen = len(records)
                if done:
                    break
                if time.perf_counter() - start > timeout:
                    stopped = f"stopped after {timeout:.0f} s (--side-timeout or --budget)"
                    progress(f"{side}: {stopped}")
                    _stop(proc, grace=5.0)
                    break
                time.sleep(1.0)
        except Cut:
            stopped = "cut: the script got SIGTERM"
            _stop(proc, grace=1.0)
    records = _read_jsonl(records_file)
    for record in records[seen:]:
        report(record)
    wall = time.perf_counter() - start
    error = None
    if stopped:
        error = f"{stopped}, {len(records)} step(s) logged"
    elif proc.returncode != 0:
        error = f"exited with {proc.returncode}:\n" + "\n".join(log.read_text().splitlines()[-40:])
    return {"records": records, "wall_s": wall, "error": error, "cut": stopped is not None and "SIGTERM" in stopped}


def ours_overrides(args: argparse.Namespace, info: dict, paths: dict, device: str) -> list[str]:
    samples = args.prompts * args.n
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        f"data.train_files={paths['data']}",
        f"data.val_files={paths['data']}",
        "data.shuffle=false",
        f"data.train_batch_size={args.prompts}",
        f"data.max_prompt_length={info['max_prompt_tokens']}",
        f"data.max_response_length={args.response_length}",
        f"model.path={paths['model']}",
        f"actor.optim.lr={LR}",
        f"actor.optim.betas=[{BETAS[0]},{BETAS[1]}]",
        f"actor.optim.weight_decay={WEIGHT_DECAY}",
        f"actor.grad_clip={GRAD_CLIP}",
        f"actor.clip_ratio={CLIP_RATIO}",
        "actor.loss_agg_mode=token-mean",
        f"actor.ppo_mini_batch_size={args.prompts}",
        "actor.ppo_epochs=1",
        f"actor.ppo_micro_batch_size_per_gpu={min(args.micro_batch, samples)}",
        f"actor.log_prob_micro_batch_size_per_gpu={min(args.micro_batch, samples)}",
        "actor.use_kl_loss=false",
        "actor.entropy_coeff=0",
        f"rollout.n={args.n}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.top_k=-1",
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.device={device}",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[file]",
        f"trainer.seed={args.seed}",
        f"trainer.default_local_dir={paths['run']}",
        f"trainer.rollout_data_dir={paths['generations']}",
        *args.ours_overrides,
    ]


OUR_STAGES = {
    "generate": "timing_s/gen",
    "log_probs": "timing_s/old_log_prob",
    "update": "timing_s/update_actor",
    "weight_sync": "timing_s/update_weights",
    "reward": "timing_s/reward",
}
STAGES = ("generate", "log_probs", "update", "weight_sync", "reward")


def run_ours(args: argparse.Namespace, info: dict, tmp: Path, device: str, timeout: float) -> dict:
    paths = {
        "data": tmp / "data.parquet",
        "model": tmp / "model",
        "run": tmp / "ours_run",
        "generations": tmp / "ours_generations",
    }
    overrides = ours_overrides(args, info, paths, device)
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]

    def report(record: dict) -> None:
        progress(
            f"ours step {record.get('step')}: {record.get('timing_s/step', 0):.2f} s (generate "
            f"{record.get('timing_s/gen', 0):.2f} s, update {record.get('timing_s/update_actor', 0):.2f} s), "
            f"mean response {record.get('response_length/mean', 0):.0f} tokens"
        )

    progress("ours: python -m verl.trainer.main_ppo, one colocated worker")
    result = run_child("ours", cmd, paths["run"] / "metrics.jsonl", tmp / "ours.log", timeout, report)
    steps = []
    tokenizer = None
    for record in result.pop("records"):
        stages = {stage: float(record.get(key, 0.0)) for stage, key in OUR_STAGES.items()}
        dump = paths["generations"] / f"{record['step']}.jsonl"
        lengths = None
        if dump.is_file():
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(paths["model"])
            lengths = [
                len(tokenizer.encode(json.loads(line)["output"], add_special_tokens=False))
                for line in dump.read_text().splitlines()
            ]
        steps.append(
            {
                "step_s": float(record["timing_s/step"]),
                **stages,
                "reward_mean": record.get("critic/score/mean"),
                "response_length_mean": record.get("response_length/mean"),
                "lengths": lengths,
                "metrics": {
                    k: v for k, v in record.items() if k.startswith(("timing_s/", "perf/", "response_length/"))
                },
            }
        )
    return {**result, "steps": steps, "overrides": overrides}


def run_trl_side(args: argparse.Namespace, info: dict, tmp: Path, device: str, timeout: float) -> dict:
    if importlib.util.find_spec("trl") is None:
        progress("trl: not importable here, skipped")
        return {"skipped": "trl is not importable", "steps": []}
    steps_file = tmp / "trl_steps.jsonl"
    spec = {
        "args": _json_args(args),
        "device": device,
        "data": str(tmp / "data.parquet"),
        "model_dir": str(tmp / "model"),
        "steps_file": str(steps_file),
    }
    spec_file = tmp / "trl_spec.json"
    spec_file.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, "trl", str(spec_file)]

    def report(record: dict) -> None:
        lengths = record.get("lengths") or [0]
        progress(
            f"trl step {record.get('step')}: {record['step_s']:.2f} s (generate {record.get('generate', 0):.2f} s), "
            f"mean response {statistics.fmean(lengths):.0f} tokens"
        )

    progress("trl: GRPOTrainer, use_vllm=False")
    result = run_child("trl", cmd, steps_file, tmp / "trl.log", timeout, report)
    version = None
    if importlib.util.find_spec("trl") is not None:
        from importlib import metadata

        version = metadata.version("trl")
    steps = []
    for record in result.pop("records"):
        stages = {stage: float(record.get(stage, 0.0)) for stage in STAGES}
        stages["update"] = record["step_s"] - float(record.get("gen_and_score", 0.0))
        stages["weight_sync"] = 0.0
        lengths = record.get("lengths") or None
        steps.append(
            {
                "step_s": float(record["step_s"]),
                **stages,
                "gen_and_score_s": record.get("gen_and_score"),
                "response_length_mean": statistics.fmean(lengths) if lengths else None,
                "lengths": lengths,
            }
        )
    return {**result, "steps": steps, "trl_version": version}


def _json_args(args: argparse.Namespace) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


def summarize(side: dict, samples: int, warmup: int) -> dict | None:
    timed = side.get("steps", [])[warmup:]
    if not timed:
        return None
    total = sum(s["step_s"] for s in timed)
    stage_means = {stage: statistics.fmean(s[stage] for s in timed) for stage in STAGES}
    step_mean = total / len(timed)
    lengths = [n for s in side["steps"] for n in (s.get("lengths") or [])]
    return {
        "steps_timed": len(timed),
        "samples_per_s": samples * len(timed) / total,
        "step_s": step_mean,
        **{f"{stage}_s": value for stage, value in stage_means.items()},
        "other_s": step_mean - sum(stage_means.values()),
        "length_mean": statistics.fmean(lengths) if lengths else None,
        "length_median": statistics.median(lengths) if lengths else None,
        "length_max": max(lengths) if lengths else None,
    }


def render(args: argparse.Namespace, info: dict, sides: dict, summary: dict, ratio: float | None) -> str:
    labels = {
        "ours": "ours: main_ppo, 1 colocated worker, hf engine",
        "trl": f"TRL {sides['trl'].get('trl_version') or TRL_VERSION} GRPOTrainer (use_vllm=False)",
    }
    rows = []
    for key, side in sides.items():
        s = summary.get(key)
        if s is None:
            why = side.get("skipped") or (side.get("error") or "no step after warm-up").splitlines()[0]
            rows.append([labels[key], f"- ({why})", *["-"] * 9])
            continue
        rows.append(
            [
                labels[key],
                s["samples_per_s"],
                s["step_s"],
                s["generate_s"],
                s["log_probs_s"],
                s["update_s"],
                s["weight_sync_s"] if key == "ours" else "none",
                s["reward_s"],
                s["other_s"],
                "-"
                if s["length_mean"] is None
                else f"{s['length_mean']:.0f} / {s['length_median']:g} / {s['length_max']}",
                s["steps_timed"],
            ]
        )
    headers = [
        "side",
        "samples/s",
        "step s",
        "generate s",
        "log-probs s",
        "update s",
        "weight sync s",
        "reward s",
        "other s",
        "response tokens mean / median / max",
        "steps timed",
    ]
    cal = info["calibration"]
    checks = info["length_checks"]
    lines = [
        f"{info['device']}; llama in Qwen2.5-0.5B's shape{' (smoke: tiny shape)' if args.smoke else ''}, "
        f"{info['params'] / 1e6:.1f}M parameters, random weights saved in {info['dtype']}; GRPO with {args.prompts} "
        f"prompts x {args.n} samples per step, responses up to {args.response_length} tokens, lengths asked per step "
        f"{', '.join(map(str, info['asked_per_step']))} (EOS from the checkpoint's length clock); micro-batches of "
        f"{args.micro_batch}; {args.steps} steps per side, the first {args.warmup} dropped; stage columns are mean "
        "seconds per timed step.",
        "",
        markdown_table(headers, rows),
        "",
    ]
    if ratio is not None:
        verdict = "meets" if ratio >= TARGET_VS_TRL else "misses"
        lines.append(f"- ours / TRL = **{ratio:.2f}x** samples/s ({verdict} the {TARGET_VS_TRL:g}x target).")
    lines.append(
        "- Length clock, checked on the saved weights before training (prompt + filler tokens): asked -> expected "
        "mean length "
        + ", ".join(f"{c['asked']} -> {c['expected_mean']:.0f}" for c in sorted(checks, key=lambda c: c["asked"]))
        + f"; final-norm scale {cal['u_median']:.3f} ({cal['u_spread'][0]:.3f}-{cal['u_spread'][1]:.3f})."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shape: exercise the code path only")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per side (the first is warm-up)")
    parser.add_argument("--warmup", type=int, default=1, help="steps dropped from the throughput")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="group size")
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--min-length", type=int, default=16, help="shortest length asked for")
    parser.add_argument("--micro-batch", type=int, default=8, help="samples per forward/backward, both sides")
    parser.add_argument(
        "--sides", nargs="+", choices=["ours", "trl"], default=["ours", "trl"], help="run in this order"
    )
    parser.add_argument("--side-timeout", type=float, default=240.0, help="seconds per side before it is stopped")
    parser.add_argument(
        "--budget",
        type=float,
        default=135.0,
        help="seconds for the whole script (not in --smoke): a side is stopped when it would run past it, and a side "
        "with under 20 s left is skipped; the results are written either way",
    )
    parser.add_argument("--ours-overrides", nargs="*", default=[], help="extra Hydra overrides for main_ppo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    if args.smoke:
        shape, device = SMOKE, "cpu"
        args.prompts, args.n, args.response_length, args.min_length, args.micro_batch = 4, 4, 48, 8, 8
        args.steps = 2
    elif not torch.cuda.is_available():
        print("skipped: gpu_grpo needs a CUDA device (none visible); nothing written. Use --smoke to check the code.")
        return None
    else:
        shape, device = QWEN25_05B, "cuda"
    samples = args.prompts * args.n
    if samples % args.micro_batch:
        parser.error(f"--micro-batch {args.micro_batch} must divide the {samples} samples of a step")
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")

    started = time.monotonic()
    budget = math.inf if args.smoke else args.budget
    # machine_info() imports these when the results are written; importing them now, beside the build, keeps a
    # write after SIGTERM within the few seconds a time limit leaves
    threading.Thread(target=library_versions, daemon=True).start()
    previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _run(args, shape, device, samples, started, budget)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)


def _run(args: argparse.Namespace, shape: dict, device: str, samples: int, started: float, budget: float) -> Any:
    with tempfile.TemporaryDirectory(prefix="bench_gpu_grpo_") as tmp_name:
        tmp = Path(tmp_name)
        spec = {
            "args": _json_args(args),
            "shape": shape,
            "device": device,
            "model_dir": str(tmp / "model"),
            "data": str(tmp / "data.parquet"),
            "info": str(tmp / "info.json"),
        }
        (tmp / "build_spec.json").write_text(json.dumps(spec))
        progress(f"building the checkpoint and prompts ({'tiny' if args.smoke else 'Qwen2.5-0.5B'} shape, {device})")
        try:
            build = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, "build", str(tmp / "build_spec.json")],
                cwd=REPO_ROOT,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
        except Cut:
            print("cut (SIGTERM) while building the checkpoint: nothing written")
            return None
        if build.returncode != 0:
            raise RuntimeError(f"building the checkpoint failed:\n{build.stdout[-2000:]}\n{build.stderr[-4000:]}")
        info = json.loads((tmp / "info.json").read_text())
        progress(
            f"checkpoint built in {info['build_s']:.1f} s; asked -> expected length: "
            + ", ".join(f"{c['asked']}->{c['expected_mean']:.0f}" for c in info["length_checks"])
        )
        sides: dict[str, dict] = {key: {"skipped": "not asked for (--sides)", "steps": []} for key in ("ours", "trl")}
        runners = {"ours": run_ours, "trl": run_trl_side}
        cut = False
        for key in dict.fromkeys(args.sides):
            left = budget - (time.monotonic() - started) - 5.0  # a few seconds to write the results
            if cut or left < 20.0:
                why = "the script got SIGTERM" if cut else f"under 20 s left of --budget {budget:.0f} s"
                sides[key] = {"skipped": why, "steps": []}
                progress(f"{key}: skipped, {why}")
                continue
            try:
                sides[key] = runners[key](args, info, tmp, device, min(args.side_timeout, left))
            except Cut:
                sides[key] = {"error": "cut: the script got SIGTERM", "steps": [], "cut": True}
            except Exception as exc:  # a side that cannot even start: record it, keep the other side's numbers
                sides[key] = {"error": f"{type(exc).__name__}: {exc}", "steps": []}
            cut = cut or bool(sides[key].get("cut"))
            if sides[key].get("error"):
                progress(f"{key}: {sides[key]['error'].splitlines()[0]}")

    summary = {key: summarize(side, samples, args.warmup) for key, side in sides.items()}
    ours, trl = summary.get("ours"), summary.get("trl")
    ratio = ours["samples_per_s"] / trl["samples_per_s"] if ours and trl else None
    markdown = render(args, info, sides, summary, ratio)
    print(markdown)
    payload = {
        "config": _json_args(args),
        "trl_version_expected": TRL_VERSION,
        "target_vs_trl": TARGET_VS_TRL,
        "shape": shape,
        "checkpoint": info,
        "ratio_ours_vs_trl": ratio,
        "summary": summary,
        "raw": sides,
    }
    return write_unless_smoke(NAME, payload, markdown, args)


def _child(kind: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if kind == "build":
        info = build_checkpoint(spec)
        Path(spec["info"]).write_text(json.dumps(info))
    elif kind == "trl":
        run_trl(spec)
    else:
        raise SystemExit(f"unknown child {kind!r}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == CHILD_FLAG:
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
