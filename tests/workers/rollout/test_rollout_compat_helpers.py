"""verl's rollout helper modules: utils, schemas, vLLM's LoRA rank table and weight loading, HFRollout and the
LLM server manager's clients."""

from __future__ import annotations

import asyncio
import copy
import socket
from types import SimpleNamespace

import pytest
import torch
from _rollout_helpers import reference_greedy, rollout_config

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerManager
from verl.workers.rollout.schemas import Message
from verl.workers.rollout.utils import (
    engine_gpus,
    ensure_async_iterator,
    get_free_port,
    get_max_position_embeddings,
    is_valid_ipv6_address,
)
from verl.workers.rollout.vllm_rollout import load_dtensor_weights
from verl.workers.rollout.vllm_rollout.utils import get_vllm_max_lora_rank


def test_ensure_async_iterator_accepts_sync_and_async_iterables():
    async def agen():
        yield 1
        yield 2

    async def collect(source):
        return [item async for item in ensure_async_iterator(source)]

    assert asyncio.run(collect([1, 2])) == [1, 2]
    assert asyncio.run(collect(agen())) == [1, 2]


def test_free_port_is_held_until_the_socket_closes():
    port, sock = get_free_port("127.0.0.1")
    try:
        assert sock.getsockname()[1] == port
        assert sock.family == socket.AF_INET
    finally:
        sock.close()
    assert is_valid_ipv6_address("::1") and not is_valid_ipv6_address("127.0.0.1")
    assert not is_valid_ipv6_address("localhost")


def test_model_length_and_engine_gpus():
    assert get_max_position_embeddings(SimpleNamespace(max_position_embeddings=128)) == 128
    assert get_max_position_embeddings(SimpleNamespace(text_config=SimpleNamespace(max_position_embeddings=64))) == 64
    with pytest.raises(ValueError, match="max_position_embeddings"):
        get_max_position_embeddings(SimpleNamespace())
    assert engine_gpus(RolloutConfig(name="vllm", tensor_model_parallel_size=2, data_parallel_size=3)) == 6


def test_message_schema_validates_tool_calls():
    message = Message(
        role="assistant", content="", tool_calls=[{"id": "c1", "function": {"name": "calc", "arguments": {"x": 1}}}]
    )
    assert message.tool_calls[0].function.name == "calc"
    with pytest.raises(ValueError):
        Message(role="user")


@pytest.mark.parametrize("rank, expected", [(1, 1), (2, 8), (8, 8), (9, 16), (300, 320), (512, 512)])
def test_vllm_max_lora_rank_rounds_up_to_an_allowed_rank(rank, expected):
    assert get_vllm_max_lora_rank(rank) == expected


def test_vllm_max_lora_rank_limits():
    with pytest.raises(ValueError, match="lora_rank"):
        get_vllm_max_lora_rank(0)
    with pytest.raises(ValueError, match="exceeds"):
        get_vllm_max_lora_rank(1024)


def test_load_dtensor_weights_passes_full_tensors_to_load_weights():
    loaded = {}

    class FakeVLLMModel:
        def load_weights(self, weights):
            loaded.update(weights)

    class FakeDTensor:
        def __init__(self, full):
            self.full = full

        def full_tensor(self):
            return self.full

    count = load_dtensor_weights({"a": torch.ones(2), "b": FakeDTensor(torch.zeros(3))}, FakeVLLMModel())
    assert count == 2 and torch.equal(loaded["b"], torch.zeros(3))
    with pytest.raises(TypeError, match="load_weights"):
        load_dtensor_weights({}, object())


def test_hf_rollout_generates_with_the_given_module(tiny_causal_lm):
    from verl.workers.rollout.hf_rollout import HFRollout

    model = copy.deepcopy(tiny_causal_lm)
    rollout = HFRollout(model, rollout_config(prompt_length=6, response_length=4, do_sample=False), pad_token_id=0)
    try:
        assert rollout.replica.model is model  # no second copy of the weights
        ids = torch.tensor([[0, 0, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8]])
        mask = (ids != 0).long()
        out = rollout.generate_sequences(
            DataProto.from_dict(
                {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
            )
        )
        for row in range(2):
            prompt = ids[row][mask[row].bool()].tolist()
            expected = reference_greedy(model, prompt, 4)
            got = out.batch["responses"][row][out.batch["response_mask"][row].bool()].tolist()
            assert got == expected
        assert out.batch["rollout_log_probs"].shape == (2, 4)
    finally:
        rollout.close()


class EchoReplica:
    def __init__(self, name: str):
        self.name = name
        self.calls: list[str] = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.calls.append(request_id)
        return TokenOutput(token_ids=[len(prompt_ids)], log_probs=[0.0])


def test_llm_server_manager_hands_out_clients_over_its_replicas():
    replicas = [EchoReplica("a"), EchoReplica("b")]
    manager = LLMServerManager(replicas=replicas)
    client = manager.get_client()

    async def run():
        return await asyncio.gather(
            *(client.generate(f"r{i}", prompt_ids=[1, 2, 3], sampling_params={}) for i in range(4))
        )

    outputs = asyncio.run(run())
    assert [o.token_ids for o in outputs] == [[3]] * 4
    assert len(replicas[0].calls) == len(replicas[1].calls) == 2
    assert isinstance(manager.get_client(FullyAsyncLLMServerClient), FullyAsyncLLMServerClient)
    with pytest.raises(RuntimeError, match="no replicas"):
        asyncio.run(LLMServerManager.create_empty()).get_client()
    with pytest.raises(TypeError, match="load_balancer_cls"):
        LLMServerManager(load_balancer_cls=dict)
