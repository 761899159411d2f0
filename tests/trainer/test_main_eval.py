"""``main_eval`` scores a generation parquet: per row the mean over its responses, per data source the mean over rows
(``test_score/<data_source>``), with the built-in scorer or a custom reward function."""

import sys

import pytest
from hydra import compose, initialize_config_module

from verl.trainer import main_eval
from verl.utils.synthetic_tasks import make_rows, write_rows


def _config(path, *extra):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="evaluation", overrides=[f"data.path={path}", *extra])


@pytest.fixture
def generated(tmp_path):
    """Two arith_seq rows (one answered right in 1 of 2 samples, one in 2 of 2) and one row of another source."""
    rows = make_rows("arith_seq", 2, seed=3)
    rows[0]["responses"] = [rows[0]["reward_model"]["ground_truth"], "wrong"]
    rows[1]["responses"] = [rows[1]["reward_model"]["ground_truth"]] * 2
    other = {**make_rows("arith_seq", 1, seed=4)[0], "data_source": "mine"}
    other["responses"] = ["anything"]
    return write_rows([*rows, other], tmp_path / "gen.parquet")


def test_builtin_scorer_averages_rows_then_sources(generated, tmp_path):
    scorer = tmp_path / "score.py"
    scorer.write_text(
        "from verl.utils.reward_score import default_compute_score\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    if data_source == 'mine':\n"
        "        return {'score': 0.25 + bonus}\n"
        "    return default_compute_score(data_source, solution_str, ground_truth)\n"
    )
    metrics = main_eval.run_eval(
        _config(
            generated,
            f"custom_reward_function.path={scorer}",
            "custom_reward_function.name=score",
            "+custom_reward_function.reward_kwargs.bonus=0.5",
        )
    )
    source = make_rows("arith_seq", 1)[0]["data_source"]
    assert metrics == {f"test_score/{source}": pytest.approx(0.75), "test_score/mine": pytest.approx(0.75)}


def test_unknown_data_source_without_a_custom_scorer_fails(generated):
    with pytest.raises(NotImplementedError, match="data_source='mine'"):
        main_eval.run_eval(_config(generated))


def test_missing_columns_name_the_key(generated, tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match=r"data.response_key='answers': .* has no such column"):
        main_eval.run_eval(_config(generated, "data.response_key=answers"))
    rows = [{"data_source": "x", "responses": ["a"], "reward_model": {"style": "rule"}}]
    bad = write_rows(rows, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="row 0 of .* expected a struct with a 'ground_truth' field"):
        main_eval.run_eval(_config(bad))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["main_eval", f"data.path={tmp_path}/none.parquet", "hydra.run.dir=."])
    with pytest.raises(SystemExit) as info:
        main_eval.main()
    assert info.value.code == 2 and "error: data.path: parquet file" in capsys.readouterr().err
