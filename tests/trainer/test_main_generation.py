"""Offline generation (``main_generation`` with verl's older keys, ``main_generation_server`` with 0.9.1's) on the
built-in hf engine: n responses per prompt in a ``responses`` column; greedy output equals ``model.generate``."""

import sys

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_module
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.trainer import main_generation, main_generation_server
from verl.utils.synthetic_tasks import make_rows, write_rows


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    return write_rows(make_rows("arith_seq", 4, seed=1, split="test"), tmp_path_factory.mktemp("gen") / "p.parquet")


def _legacy(overrides):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="generation", overrides=overrides)


def _args(prompts_file, model_dir, out, *extra):
    return [
        f"data.path={prompts_file}",
        f"data.output_path={out}",
        f"model.path={model_dir}",
        "rollout.dtype=float32",
        "rollout.prompt_length=32",
        "rollout.response_length=8",
        *extra,
    ]


def test_samples_n_responses_per_row(prompts_file, tiny_model_dir, tmp_path):
    out = tmp_path / "nested" / "gen.parquet"
    main_generation.run_generation(
        _legacy(_args(prompts_file, tiny_model_dir, out, "data.n_samples=3", "data.batch_size=3"))
    )
    result = pd.read_parquet(out)
    source = pd.read_parquet(prompts_file)
    assert list(result.columns) == [*source.columns, "responses"] and len(result) == 4
    assert all(len(r) == 3 and all(isinstance(t, str) for t in r) for r in result["responses"])


def test_greedy_matches_model_generate(prompts_file, tiny_model_dir, tmp_path):
    out = tmp_path / "greedy.parquet"
    main_generation.run_generation(
        _legacy(_args(prompts_file, tiny_model_dir, out, "data.n_samples=1", "rollout.temperature=0"))
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for row in pd.read_parquet(out).itertuples():
        ids = tokenizer.apply_chat_template(
            list(row.prompt), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            full = model.generate(**ids, max_new_tokens=8, do_sample=False)
        want = tokenizer.decode(full[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        assert list(row.responses) == [want]


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        (["data.path=/nonexistent/p.parquet"], FileNotFoundError, "data.path: parquet file /nonexistent/p.parquet"),
        (["data.prompt_key=question"], ValueError, "data.prompt_key='question': .* has no such column"),
        (["data.n_samples=2", "rollout.temperature=0"], ValueError, r"data.n_samples=2 with greedy decoding"),
        (["rollout.name=vllm"], ValueError, r"rollout.name='vllm': offline generation runs on the built-in hf"),
        (["data.output_path=null"], ValueError, "data.output_path is required"),
    ],
)
def test_bad_settings_name_the_key(prompts_file, tiny_model_dir, tmp_path, extra, error, message):
    with pytest.raises(error, match=message):
        main_generation.run_generation(_legacy(_args(prompts_file, tiny_model_dir, tmp_path / "o.parquet", *extra)))


def test_cli_exits_with_the_error(prompts_file, tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "main_generation",
            "hydra.run.dir=.",
            *_args(tmp_path / "missing.parquet", tiny_model_dir, tmp_path / "o.parquet"),
        ],
    )
    with pytest.raises(SystemExit) as info:
        main_generation.main()
    assert info.value.code == 2 and "error: data.path: parquet file" in capsys.readouterr().err


@pytest.mark.parametrize("output_key", ["data.output_path", "+data.output_path"])
def test_server_variant_reads_actor_rollout_ref_keys(prompts_file, tiny_model_dir, tmp_path, output_key):
    out = tmp_path / "server.parquet"
    main_generation_server.main(
        [
            f"data.train_files={prompts_file}",
            "data.prompt_key=prompt",
            f"{output_key}={out}",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.response_length=8",
            "actor_rollout_ref.rollout.prompt_length=32",
            "actor_rollout_ref.rollout.temperature=1.0",
            "actor_rollout_ref.rollout.top_p=0.9",
        ]
    )
    result = pd.read_parquet(out)
    assert len(result) == 4 and all(len(r) == 2 for r in result["responses"])


def test_server_variant_needs_an_output_path(prompts_file, tiny_model_dir, capsys):
    with pytest.raises(SystemExit) as info:
        main_generation_server.main(
            [f"data.train_files={prompts_file}", f"actor_rollout_ref.model.path={tiny_model_dir}"]
        )
    assert info.value.code == 2 and "data.output_path is required" in capsys.readouterr().err
