"""The OpenAI gateway serves an agent on another node: it runs in an actor on one node of a real multi-node Ray
cluster, over the real hf engine (tiny model), bound to the machine's non-loopback IP; a task pinned to the other
node calls it with the official ``openai`` client, and only the gateway's bearer token gets through."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("openai")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from verl.experimental.agent_loop.openai_gateway import is_loopback_host, node_ip_address  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.multinode]

MULTINODE_WORKER_NODES = 1
MESSAGES = [{"role": "user", "content": "hi there"}]
GREEDY = {"temperature": 0.0, "do_sample": False, "ignore_eos": True, "max_tokens": 8}


def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id, soft=False)


@ray.remote(num_cpus=1)
class GatewayHost:
    """An agent-loop worker's share of the job: a replica over the tiny model and the gateway in front of it."""

    async def start(self, model_dir: str, host: str) -> dict:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verl.experimental.agent_loop.openai_gateway import OpenAIGateway
        from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
        from verl.workers.config import RolloutConfig, SamplingConfig
        from verl.workers.rollout.hf.server import HFRolloutServer

        torch.set_num_threads(1)
        config = RolloutConfig(
            name="hf",
            prompt_length=40,
            response_length=16,
            max_num_seqs=4,
            dtype="float32",
            calculate_log_probs=True,
            free_cache_engine=False,
            val_kwargs=SamplingConfig(temperature=0.0, do_sample=False),
        )
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        replica = HFRolloutServer(config, model=model)
        self.gateway = OpenAIGateway(
            AsyncLLMServerManager([replica]),
            AutoTokenizer.from_pretrained(model_dir),
            host=host,
            default_sampling_params=GREEDY,
        )
        await self.gateway.start()
        return {
            "base_url": self.gateway.session_base_url("remote-agent"),
            "token": self.gateway.auth_token,
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def recorded(self) -> tuple[list[list[int]], int]:
        return [call.response_ids for call in self.gateway.calls("remote-agent")], self.gateway.num_refused


@ray.remote(num_cpus=1)
def remote_agent(base_url: str, token: str) -> dict:
    """What an agent on another node does with ``ctx.base_url`` / ``ctx.api_key``: plain synchronous client calls."""
    import openai

    def refused(api_key: str | None) -> tuple[int, str] | None:
        client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0, timeout=30)
        no_header = {"Authorization": openai.Omit()} if api_key is None else None  # send no Authorization at all
        try:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2, extra_headers=no_header)
        except openai.AuthenticationError as err:
            return err.status_code, err.message
        return None

    client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=60)
    reply = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "token_ids": reply.choices[0].token_ids,
        "text": reply.choices[0].message.content,
        "no_token": refused(None),
        "wrong_token": refused("wrong"),
    }


def test_an_agent_on_another_node_needs_the_token(multinode_cluster, tiny_model_dir):
    ip = node_ip_address()  # the cluster's address for this machine, as Ray reports it
    if is_loopback_host(ip):
        pytest.skip("this machine has no non-loopback IPv4 address to bind the gateway to")
    head, worker = multinode_cluster.node_ids()
    host = GatewayHost.options(scheduling_strategy=pinned(worker)).remote()
    try:
        served = ray.get(host.start.remote(str(tiny_model_dir), ip), timeout=120)
        assert served["node_id"] == worker and served["base_url"].startswith(f"http://{ip}:")
        assert served["token"]  # off loopback a token is always set
        result = ray.get(
            remote_agent.options(scheduling_strategy=pinned(head)).remote(served["base_url"], served["token"]),
            timeout=120,
        )
        responses, num_refused = ray.get(host.recorded.remote(), timeout=30)
    finally:
        ray.kill(host)
    assert result["node_id"] == head != served["node_id"]
    assert result["no_token"][0] == result["wrong_token"][0] == 401
    assert "no bearer token" in result["no_token"][1] and "incorrect bearer token" in result["wrong_token"][1]
    assert num_refused == 2
    assert responses == [result["token_ids"]] and len(result["token_ids"]) == 4  # only the authorised call ran
