"""A loop written against verl's agent-loop API runs unchanged in this worker: registered with verl's ``register``,
built with verl's constructor keywords, generating through ``self.server_manager.generate(request_id=..., ...)`` with
verl's optional arguments, returning a pydantic ``AgentLoopOutput`` with a metrics dict. Also verl-style registry
entries (a dotted ``_target_`` written into ``_agent_loop_registry``, built by Hydra) and verl's config nesting."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import pytest
from _agent_loop_helpers import greedy, make_config, prompt_batch
from omegaconf import OmegaConf

from verl.experimental.agent_loop import agent_loop as agent_loop_module
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    register,
)
from verl.experimental.agent_loop.config import rollout_group
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.workers.rollout.replica import TokenOutput

QUESTION = [{"role": "user", "content": "hi"}]


@register("verl_style_test")
class VerlStyleLoop(AgentLoopBase):
    """Written the way verl's own single-turn loop is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen_kwargs = kwargs
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        prompt_ids = await self.ct_build_initial_tokens(messages)
        metrics: dict[str, Any] = {}
        output: TokenOutput = await self.server_manager.generate(
            request_id=uuid4().hex,
            prompt_ids=prompt_ids,
            sampling_params=sampling_params,
            image_data=None,
            video_data=None,
            audio_data=None,
            mm_processor_kwargs={},
            priority=0,
        )
        metrics["num_preempted"] = output.num_preempted if output.num_preempted is not None else -1
        merged, mask, logprobs = await self.ct_merge_assistant_token(
            prompt_ids, output.token_ids, [], [] if output.log_probs else None, assistant_logprobs=output.log_probs
        )
        response_ids = merged.token_ids[len(prompt_ids) :]
        tools = self.seen_kwargs["tools"]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            multi_modal_data={},
            num_turns=2,
            metrics=metrics,
            extra_fields={
                "saw": [isinstance(tools, ToolListWrap), type(self.data_config).__name__, self.dataset_cls.__name__]
            },
        )


def test_a_verl_style_loop_runs_in_the_worker(tiny_model_dir, tiny_lm, make_replica):
    config = make_config(tiny_model_dir, prompt_length=24)
    # verl's llm_client form: a ready client instead of the replica list
    worker = AgentLoopWorker(config, AsyncLLMServerManager([make_replica(config["rollout"])]))
    prompt = list(
        worker.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    batch = prompt_batch([prompt], agent_names=["verl_style_test"], raw_prompt=[QUESTION])
    out = asyncio.run(worker.generate_sequences(batch))

    R = config["rollout"].response_length
    response = greedy(tiny_lm, prompt, R)
    assert out.batch["responses"][0].tolist() == response
    assert out.batch["prompts"][0, -len(prompt) :].tolist() == prompt
    assert out.batch["response_mask"][0].tolist() == [1] * R
    assert out.non_tensor_batch["saw"][0] == [True, "DataConfig", "RLHFDataset"]  # the typed data group
    assert out.meta_info["metrics"][0]["num_preempted"] == -1  # the metrics dict became AgentLoopMetrics


def test_a_verl_style_registry_entry_is_built_by_hydra(tiny_model_dir, make_replica, monkeypatch):
    calls = []
    real = agent_loop_module.hydra.utils.instantiate

    def spy(*args, **kwargs):
        calls.append(kwargs["config"])
        return real(*args, **kwargs)

    monkeypatch.setattr(agent_loop_module.hydra.utils, "instantiate", spy)
    monkeypatch.setitem(
        agent_loop_module._agent_loop_registry,
        "hydra_yaml_echo",
        {"_target_": "_agent_loop_helpers.YamlLoop", "answer_token": 7},
    )
    config = make_config(tiny_model_dir)
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])])
    out = asyncio.run(worker.generate_sequences(prompt_batch([[1, 2]], agent_names=["hydra_yaml_echo"])))
    assert out.batch["responses"][0, 0].item() == 7
    assert calls == [{"_target_": "_agent_loop_helpers.YamlLoop", "answer_token": 7}]
    # a class registered with @register is built directly, without Hydra
    asyncio.run(worker.generate_sequences(prompt_batch([[1, 2]], agent_names=["two_turn_test"], turn_tokens=[[1, 1]])))
    assert len(calls) == 1


def test_verl_config_nesting_and_wrapped_config():
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 16, "response_length": 8}, "model": {"path": "unused"}},
            "data": {"apply_chat_template_kwargs": {"enable_thinking": False}},
        }
    )
    assert rollout_group(config).prompt_length == 16

    class Loop(AgentLoopBase):
        async def run(self, sampling_params, **kwargs):
            raise NotImplementedError

    loop = Loop(
        trainer_config=DictConfigWrap(config),
        server_manager=None,
        tokenizer=None,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        hf_model_type="llama",
        extra=1,
    )
    assert loop.config is config and loop.response_length == 8
    assert loop.apply_chat_template_kwargs == {"enable_thinking": False} and loop.loop_kwargs == {"extra": 1}


def test_agent_loop_output_accepts_a_metrics_dict_and_checks_lengths():
    out = AgentLoopOutput(
        prompt_ids=[1],
        response_ids=[2, 3],
        response_mask=[1, 0],
        reward_score=2.0,
        metrics={"generate_sequences": 1.5, "num_preempted": 0},
    )
    assert isinstance(out.metrics, AgentLoopMetrics) and out.metrics.generate_sequences == 1.5
    fields = out.as_dict()
    assert fields["responses"].tolist() == [2, 3] and fields["rm_scores"].tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="response_mask has 1 entries for 2 response_ids"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3], response_mask=[1])


def test_token_output_takes_verl_field_names():
    out = TokenOutput(token_ids=[1, 2], log_probs=[-0.1, -0.2], extra_fields={"global_steps": 3})
    assert out.extra == {"global_steps": 3} and out.extra_fields is out.extra
    out.extra_fields["k"] = 1
    assert out.extra["k"] == 1 and out.routed_experts is None


class _Replica:
    async def generate(self, prompt_ids, sampling_params, request_id):
        return TokenOutput(token_ids=[5])


def test_server_manager_takes_verl_arguments_and_refuses_media():
    manager = AsyncLLMServerManager([_Replica()])

    def generate(**kwargs):
        return asyncio.run(manager.generate("r", prompt_ids=[1], sampling_params={}, **kwargs))

    assert generate(image_data=None, video_data=[], mm_processor_kwargs={"fps": 2}, priority=3).token_ids == [5]
    with pytest.raises(
        NotImplementedError, match="request r: image_data given, but the rollout replicas are text-only"
    ):
        generate(image_data=["an image"])
    with pytest.raises(TypeError, match="unexpected keyword argument 'temperature'"):
        generate(temperature=1.0)


class _RewardActor:
    """Stands in for verl's reward-loop actor: ``compute_score.remote(batch)`` is awaitable."""

    def __init__(self):
        self.batches = []

        async def remote(batch):
            self.batches.append(batch)
            return {"reward_score": float(batch.batch["responses"].shape[-1]), "reward_extra_info": {"acc": True}}

        self.compute_score = type("Method", (), {"remote": staticmethod(remote)})()


def test_reward_loop_actors_score_each_trajectory(tiny_model_dir, make_replica):
    config = make_config(tiny_model_dir)
    actor = _RewardActor()
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])], None, [actor])
    batch = prompt_batch(
        [[1, 2], [1, 3]], agent_names=["two_turn_test"] * 2, turn_tokens=[[2, 1], [1, 1]], data_source=["d", "d"]
    )
    out = asyncio.run(worker.generate_sequences(batch))
    lengths = [2 + 2 + 1, 1 + 2 + 1]  # first turn, two inserted tokens, second turn
    assert [b.non_tensor_batch["data_source"].tolist() for b in actor.batches] == [["d"], ["d"]]
    rows = out.batch["rm_scores"]
    assert [rows[i, n - 1].item() for i, n in enumerate(lengths)] == [float(n) for n in lengths]
    assert out.non_tensor_batch["acc"].tolist() == [True, True]
    assert "data_source" not in out.non_tensor_batch, "rows the reward actors received are not passed through"
