"""Agent-loop registry: decorator, YAML registration, lazy built-ins, snapshots, and the errors users see."""

from __future__ import annotations

import asyncio

import pytest
from _agent_loop_helpers import TwoTurnLoop, YamlLoop, make_config, prompt_batch

from verl.experimental.agent_loop import (
    AgentLoopBase,
    AgentLoopWorker,
    SingleTurnAgentLoop,
    get_agent_loop_class,
    list_agent_loops,
    load_agent_loop_config,
    register,
)
from verl.experimental.agent_loop.registry import registry_snapshot, restore_registry


def test_builtins_and_decorated_loops_resolve():
    assert get_agent_loop_class("single_turn_agent") is SingleTurnAgentLoop
    assert get_agent_loop_class("two_turn_test") is TwoTurnLoop
    assert {"single_turn_agent", "tool_agent", "two_turn_test"} <= set(list_agent_loops())


def test_register_rejects_clashes_and_non_loops():
    register("two_turn_test")(TwoTurnLoop)  # the same class again is fine (module re-import)

    class Other(AgentLoopBase):
        async def run(self, sampling_params, **kwargs):
            raise NotImplementedError

    with pytest.raises(ValueError, match="'two_turn_test' is already registered to .*TwoTurnLoop"):
        register("two_turn_test")(Other)
    with pytest.raises(TypeError, match="agent loop 'plain': .* is not a subclass of AgentLoopBase"):
        register("plain")(dict)


def test_unknown_name_lists_registered_ones():
    with pytest.raises(
        ValueError,
        match=r"agent_name 'nope' is not a registered agent loop; registered: "
        r".*single_turn_agent.*tool_agent.*two_turn_test",
    ):
        get_agent_loop_class("nope")


def test_yaml_registration_passes_extra_keys_to_the_loop(tmp_path, tiny_model_dir, make_replica):
    path = tmp_path / "agents.yaml"
    path.write_text("- name: yaml_echo\n  _target_: _agent_loop_helpers.YamlLoop\n  answer_token: 42\n")
    assert load_agent_loop_config(str(path)) == ["yaml_echo"]
    assert get_agent_loop_class("yaml_echo") is YamlLoop

    config = make_config(tiny_model_dir, agent_loop_config_path=str(path))
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])])
    out = asyncio.run(worker.generate_sequences(prompt_batch([[1, 2, 3]], agent_names=["yaml_echo"])))
    assert out.batch["responses"][0, :2].tolist() == [42, worker.pad_token_id]


def test_yaml_file_target_form(tmp_path):
    module = tmp_path / "my_agents.py"
    module.write_text(
        "from verl.experimental.agent_loop import AgentLoopBase\n"
        "class FileLoop(AgentLoopBase):\n"
        "    async def run(self, sampling_params, **kwargs):\n"
        "        raise NotImplementedError\n"
    )
    path = tmp_path / "agents.yaml"
    path.write_text(f"- name: file_loop\n  _target_: {module}:FileLoop\n")
    load_agent_loop_config(path)
    assert get_agent_loop_class("file_loop").__name__ == "FileLoop"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\n", "must hold a list of"),
        ("- name: x\n", "entry 0: every entry needs 'name' and '_target_'"),
        ("- name: x\n  _target_: no_such_module_xyz.Loop\n", "cannot import module 'no_such_module_xyz'"),
        ("- name: x\n  _target_: _agent_loop_helpers.Missing\n", "has no attribute 'Missing'"),
        ("- name: x\n  _target_: builtins.dict\n", "is not a subclass of AgentLoopBase"),
    ],
)
def test_yaml_errors_name_the_file_and_entry(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises((ValueError, ImportError, TypeError), match=message):
        load_agent_loop_config(path)


def test_missing_yaml_file_names_the_config_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="rollout.agent.agent_loop_config_path=.*no such file"):
        load_agent_loop_config(tmp_path / "absent.yaml")


def test_snapshot_restores_in_another_registry():
    snapshot = registry_snapshot()
    assert snapshot["two_turn_test"] == {"_target_": TwoTurnLoop}
    restore_registry(snapshot)  # idempotent
    assert get_agent_loop_class("two_turn_test") is TwoTurnLoop
