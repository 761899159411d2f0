"""The build steps recipes override on verl's FSDP workers (``ActorRolloutRefWorker._build_model_optimizer``,
``CriticWorker._build_critic_model_optimizer``) are what ``init_model`` runs, with verl's arguments, and what they
return is what the worker trains: a module a recipe adds after ``super()`` ends up sharded inside the model and in
the optimizer, an optimizer of its own is the one stepped, an actor it swaps in reads per-rank sizes. Results the
worker cannot use fail naming the class and the step.

The workers run in spawned processes (torch.distributed over gloo): two ranks for the sharded case, one for the rest.
"""

from __future__ import annotations

import os
import socket
import traceback

import pytest
import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from torch import nn

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, register
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

PROMPT_LEN, RESPONSE_LEN, ROWS = 6, 5, 4


def worker_config(model_dir: str, rollout_n: int = 1):
    return OmegaConf.create(
        {
            "model": {"path": model_dir},
            "actor": {
                "ppo_mini_batch_size": ROWS,
                "ppo_micro_batch_size_per_gpu": 2,
                "log_prob_micro_batch_size_per_gpu": 2,
                "optim": {"lr": 1e-2},
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 2},
            "rollout": {"n": rollout_n, "temperature": 1.0, "prompt_length": PROMPT_LEN, "response_length": 8},
            "trainer": {"device": "cpu", "seed": 3},
        }
    )


def make_batch(vocab_size: int, rows: int = ROWS) -> DataProto:
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, vocab_size, (rows, PROMPT_LEN), generator=gen)
    responses = torch.randint(1, vocab_size, (rows, RESPONSE_LEN), generator=gen)
    response_mask = torch.ones(rows, RESPONSE_LEN, dtype=torch.long)
    attention_mask = torch.cat([torch.ones(rows, PROMPT_LEN, dtype=torch.long), response_mask], dim=1)
    return DataProto.from_dict(
        {
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "response_mask": response_mask,
            "advantages": torch.randn(rows, RESPONSE_LEN, generator=gen),
            "returns": torch.randn(rows, RESPONSE_LEN, generator=gen),
        },
        meta_info={"temperature": 1.0},
    )


def _full(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).clone()


# ---------------------------------------------------------------------------- the recipe's classes


class ShiftActor(DataParallelPPOActor):
    """Uses the head the worker added: a learned per-token shift of the log-prob from the token's entropy."""

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        entropy, log_prob = super()._forward_micro_batch(micro_batch, temperature, calculate_entropy=True)
        shift = self.actor_module.aux_head(entropy.detach().unsqueeze(-1)).squeeze(-1)
        return (entropy if calculate_entropy else None), log_prob + shift


class AuxHeadWorker(ActorRolloutRefWorker):
    """Adds a head to the model ``super()`` built (and so sharded) and gives it to the optimizer; swaps in its actor,
    built from the worker's config as verl recipes do."""

    def _build_model_optimizer(self, *args, role="actor", **kwargs):
        self.__dict__.setdefault("built_roles", []).append(role)
        module, optimizer, lr_scheduler, model_config = super()._build_model_optimizer(*args, role=role, **kwargs)
        if role == "actor":
            module.add_module("aux_head", nn.Linear(1, 1))
            optimizer.add_param_group({"params": list(module.aux_head.parameters()), "lr": 0.1})
        return module, optimizer, lr_scheduler, model_config

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        if self._is_actor:
            self.actor = ShiftActor(self.config.actor, self.actor_module_fsdp, self.actor_optimizer)


class OwnOptimizerWorker(ActorRolloutRefWorker):
    """Returns its own optimizer and schedule (SGD at a fixed rate) for the module verl's step built."""

    def _build_model_optimizer(self, *args, role="actor", **kwargs):
        module, _, _, model_config = super()._build_model_optimizer(*args, role=role, **kwargs)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
        return module, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0), model_config


class ThreeTupleWorker(ActorRolloutRefWorker):
    def _build_model_optimizer(self, *args, **kwargs):
        return super()._build_model_optimizer(*args, **kwargs)[:3]


class NoSchedulerWorker(ActorRolloutRefWorker):
    def _build_model_optimizer(self, *args, **kwargs):
        module, optimizer, _, model_config = super()._build_model_optimizer(*args, **kwargs)
        return module, optimizer, None, model_config


class ValueBiasCriticWorker(CriticWorker):
    def _build_critic_model_optimizer(self, config):
        self.build_config = config
        module, optimizer, lr_scheduler = super()._build_critic_model_optimizer(config)
        module.add_module("aux_head", nn.Linear(2, 1))
        optimizer.add_param_group({"params": list(module.aux_head.parameters())})
        return module, optimizer, lr_scheduler


class TwoTupleCriticWorker(CriticWorker):
    def _build_critic_model_optimizer(self, config):
        return super()._build_critic_model_optimizer(config)[:2]


# ---------------------------------------------------------------------------- what each process runs


def _sharded_case(model_dir: str) -> dict:
    """The recipe's head on a sharded model: sharded itself, in the optimizer, trained, and not sent to rollouts."""
    worker = AuxHeadWorker(worker_config(model_dir), role="actor")
    worker.init_model()
    module = worker.actor_module_fsdp
    held = {id(p) for group in worker.actor_optimizer.param_groups for p in group["params"]}
    head = dict(module.aux_head.named_parameters())
    before = {name: _full(p) for name, p in head.items()}
    data = make_batch(module.config.vocab_size).chunk(worker.world_size)[worker.rank]  # one mini-batch each
    metrics = worker.update_actor(data).meta_info["metrics"]
    rollout_names = [name for bucket in worker.iter_rollout_weight_buckets(1 << 20) for name, _ in bucket]
    return {
        "built_roles": worker.built_roles,
        "head_sharded": {name: hasattr(p, "full_tensor") for name, p in head.items()},
        "head_in_optimizer": all(id(p) in held for p in head.values()),
        "head_before": before,
        "head_after": {name: _full(p) for name, p in module.aux_head.named_parameters()},
        "group_lrs": [group["lr"] for group in worker.actor_optimizer.param_groups],
        "grad_norms": metrics["actor/grad_norm"],
        "rollout_names": rollout_names,
        "actor_mini_batch": worker.actor.config.ppo_mini_batch_size,
    }


def _expect_error(build, *args, **kwargs) -> str:
    try:
        build(*args, **kwargs).init_model()
    except (TypeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return "no error"


def _one_rank_cases(model_dir: str) -> dict:
    config = worker_config(model_dir, rollout_n=2)
    out: dict = {}

    recipe = AuxHeadWorker(config, role="actor")
    recipe.init_model()
    vocab = recipe.actor_module_fsdp.config.vocab_size
    recipe.update_actor(make_batch(vocab, rows=2 * ROWS))
    out["recipe_actor"] = (type(recipe.actor).__name__, recipe.actor.config.ppo_mini_batch_size)

    ref = AuxHeadWorker(config, role="ref")
    ref.init_model()
    ref_log_prob = ref.compute_ref_log_prob(make_batch(vocab)).batch["ref_log_prob"]
    out["ref"] = (ref.built_roles, ref.ref_module_fsdp is not None, tuple(ref_log_prob.shape))

    own = OwnOptimizerWorker(config, role="actor")
    own.init_model()
    before = [p.detach().clone() for p in own.actor_module_fsdp.parameters()]
    own.update_actor(make_batch(vocab, rows=2 * ROWS))
    moved = any(not torch.equal(a, p) for a, p in zip(before, own.actor_module_fsdp.parameters()))
    out["own"] = (type(own.actor_optimizer).__name__, own.actor.actor_optimizer is own.actor_optimizer, moved)

    out["three_tuple"] = _expect_error(ThreeTupleWorker, config, role="actor")
    out["no_scheduler"] = _expect_error(NoSchedulerWorker, config, role="actor")

    critic_config = OmegaConf.create(
        {
            "model": {"path": model_dir},
            "ppo_mini_batch_size": ROWS,
            "ppo_micro_batch_size_per_gpu": 2,
            "forward_micro_batch_size_per_gpu": 2,
            "cliprange_value": 0.5,
            "optim": {"lr": 1e-2},
        }
    )
    critic = ValueBiasCriticWorker(critic_config)
    critic.init_model()
    held = {id(p) for group in critic.critic_optimizer.param_groups for p in group["params"]}
    data = make_batch(vocab)
    data = data.union(critic.compute_values(data))
    critic_metrics = critic.update_critic(data).meta_info["metrics"]
    out["critic"] = (
        critic.build_config is critic.critic_config,
        all(id(p) in held for p in critic.critic_module.aux_head.parameters()),
        critic.critic.critic_module is critic.critic_module,
        len(critic_metrics["critic/grad_norm"]),
    )
    out["critic_two_tuple"] = _expect_error(TwoTupleCriticWorker, critic_config)
    return out


def _process(rank: int, world_size: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    try:
        result = _sharded_case(model_dir) if world_size > 1 else _one_rank_cases(model_dir)
    except Exception:  # noqa: BLE001 - the parent reports it
        result = {"error": traceback.format_exc()}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(world_size: int, model_dir, out_dir) -> list[dict]:
    for _ in range(3):  # a free port may be taken by another test process before the group binds it: try another
        mp.spawn(_process, args=(world_size, _free_port(), str(model_dir), str(out_dir)), nprocs=world_size, join=True)
        results = [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]
        if not any("EADDRINUSE" in result.get("error", "") for result in results):
            break
    for result in results:
        assert "error" not in result, result.get("error")
    return results


@pytest.fixture(scope="module")
def sharded(tiny_model_dir, tmp_path_factory) -> list[dict]:
    return _run(2, tiny_model_dir, tmp_path_factory.mktemp("hooks_sharded"))


@pytest.fixture(scope="module")
def one_rank(tiny_model_dir, tmp_path_factory) -> dict:
    return _run(1, tiny_model_dir, tmp_path_factory.mktemp("hooks_one_rank"))[0]


def test_a_head_added_after_super_is_sharded_in_the_optimizer_and_trained(sharded):
    for result in sharded:
        assert result["built_roles"] == ["actor"]
        assert result["head_sharded"] == {"weight": True, "bias": True}
        assert result["head_in_optimizer"]
        assert result["group_lrs"] == [1e-2, 0.1]  # the schedule stepped both groups, each from its own lr
        assert not any(name.startswith("aux_head") for name in result["rollout_names"])
        assert "lm_head.weight" in result["rollout_names"]
        assert result["actor_mini_batch"] == ROWS // 2  # the swapped-in actor reads per-rank sizes
        for name, after in result["head_after"].items():
            assert not torch.equal(after, result["head_before"][name]), f"aux_head.{name} did not train"
    for name, after in sharded[0]["head_after"].items():  # one logical tensor: both ranks see the same update
        torch.testing.assert_close(sharded[1]["head_after"][name], after)


def test_build_steps_run_with_the_role_and_their_results_are_used(one_rank):
    assert one_rank["recipe_actor"] == ("ShiftActor", ROWS * 2)  # 4 prompts x rollout.n 2 on one rank
    assert one_rank["ref"] == (["ref"], True, (ROWS, RESPONSE_LEN))
    assert one_rank["own"] == ("SGD", True, True)
    assert one_rank["critic"] == (True, True, True, 1)  # the critic group, head in the optimizer, one step


def test_unusable_build_results_fail_naming_the_class_and_step(one_rank):
    assert one_rank["three_tuple"].startswith(
        "TypeError: ThreeTupleWorker._build_model_optimizer(role='actor') returned a tuple of 3 items"
    )
    assert (
        "NoSchedulerWorker._build_model_optimizer(role='actor') returned NoneType None as the lr_scheduler"
        in (one_rank["no_scheduler"])
    )
    assert one_rank["critic_two_tuple"].startswith(
        "TypeError: TwoTupleCriticWorker._build_critic_model_optimizer returned a tuple of 2 items"
    )
