"""FSDP2 workers on the shared local Ray cluster (CPU, gloo): data-parallel equivalence, checkpoints, HF export,
the hybrid rollout engine, and LoRA.

The 1-rank and 2-rank groups are module-scoped and driven in lock-step (every update is applied to both), so each
test can compare them; tests run in file order and build on the previous state.
"""

from __future__ import annotations

import asyncio
import math
import os

import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.single_controller.ray.errors import WorkerError
from verl.utils.torch_functional import compute_position_id_with_mask, logprobs_from_logits
from verl.workers.fsdp.weights import iter_full_state
from verl.workers.fsdp_workers import ActorRolloutRefWorker

pytestmark = pytest.mark.ray

PROMPT_LEN, RESPONSE_LEN = 8, 6


class ProbeActorWorker(ActorRolloutRefWorker):
    """Adds introspection the tests need; everything else is the real worker."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def actor_state(self) -> dict[str, torch.Tensor]:
        return dict(iter_full_state(self.actor_module_fsdp))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fused_flags(self) -> tuple[bool, bool]:
        return self.actor.use_fused_kernels, self.ref_policy.use_fused_kernels

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def trainable_names(self) -> list[str]:
        return [name for name, p in self.actor_module_fsdp.named_parameters() if p.requires_grad]


def make_config(model_path: str, **overrides) -> OmegaConf:
    cfg = OmegaConf.create(
        {
            "model": {"path": str(model_path), "lora_rank": 0},
            "actor": {
                "ppo_mini_batch_size": 4,
                "ppo_micro_batch_size_per_gpu": 2,
                "ppo_epochs": 2,
                "shuffle": True,
                "log_prob_micro_batch_size_per_gpu": 2,
                "rollout_n": 1,
                "optim": {"lr": 5e-3},
                "checkpoint": {"save_contents": ["model", "optimizer", "extra", "hf_model"]},
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 2},
            "rollout": {
                "prompt_length": PROMPT_LEN,
                "response_length": RESPONSE_LEN,
                "calculate_log_probs": True,
                "n": 1,
                "temperature": 1.0,
            },
            "trainer": {"device": "cpu", "seed": 7},
        }
    )
    return OmegaConf.merge(cfg, OmegaConf.create(overrides))


def make_group(config, world_size: int, role: str = "actor_rollout_ref") -> RayWorkerGroup:
    pool = RayResourcePool([world_size], use_gpu=False)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ProbeActorWorker, config=config, role=role))
    return group


def make_prompts(batch_size: int = 4, seed: int = 0) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (batch_size, PROMPT_LEN), generator=gen)
    mask = torch.ones(batch_size, PROMPT_LEN, dtype=torch.long)
    for i in range(batch_size):
        mask[i, : i % 3] = 0  # left padding of 0, 1 or 2 tokens
    ids[mask == 0] = 0
    return DataProto.from_dict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    )


def make_batch(seed: int = 1) -> DataProto:
    """4 prompt+response rows; both halves (the two ranks' chunks) hold 9 response tokens, so token-mean losses
    averaged over ranks equal the token mean over the whole batch."""
    prompts = make_prompts(4, seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = [6, 3, 3, 6]
    responses = torch.randint(5, 100, (4, RESPONSE_LEN), generator=gen)
    response_mask = torch.zeros(4, RESPONSE_LEN, dtype=torch.long)
    for i, n in enumerate(lengths):
        response_mask[i, :n] = 1
    responses[response_mask == 0] = 0
    attention_mask = torch.cat([prompts.batch["attention_mask"], response_mask], dim=-1)
    return DataProto.from_dict(
        {
            "prompts": prompts.batch["input_ids"],
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts.batch["input_ids"], responses], dim=-1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "advantages": torch.randn(4, RESPONSE_LEN, generator=gen),
        },
        meta_info={"temperature": 1.0},
    )


def with_old_log_probs(group: RayWorkerGroup, batch: DataProto) -> DataProto:
    old = group.compute_log_prob(batch)
    return batch.union(old.select(batch_keys=["old_log_probs"], meta_info_keys=[]))


def mean(values) -> float:
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def groups(ray_cluster, tiny_model_dir):
    config = make_config(tiny_model_dir)
    one, two = make_group(config, 1), make_group(config, 2)
    one.init_model()
    two.init_model()
    yield one, two
    for group in (one, two):
        group.shutdown()
        group.resource_pool.release()


def test_log_probs_two_ranks_equal_one_rank(groups):
    one, two = groups
    batch = make_batch()
    lp1, lp2 = one.compute_log_prob(batch), two.compute_log_prob(batch)
    mask = batch.batch["response_mask"].bool()
    assert lp1.batch["old_log_probs"].shape == (4, RESPONSE_LEN)
    torch.testing.assert_close(lp2.batch["old_log_probs"][mask], lp1.batch["old_log_probs"][mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lp2.batch["entropys"][mask], lp1.batch["entropys"][mask], atol=1e-5, rtol=1e-5)
    ref = two.compute_ref_log_prob(batch)  # the reference starts equal to the policy
    torch.testing.assert_close(ref.batch["ref_log_prob"][mask], lp2.batch["old_log_probs"][mask], atol=1e-6, rtol=0)


def test_ppo_update_two_ranks_equals_one_rank(groups):
    one, two = groups
    batch = with_old_log_probs(one, make_batch(seed=2))
    before = one.compute_log_prob(batch).batch["old_log_probs"]
    m1 = one.update_actor(batch).meta_info["metrics"]
    m2 = two.update_actor(batch).meta_info["metrics"]
    mask = batch.batch["response_mask"].bool()
    after1 = one.compute_log_prob(batch).batch["old_log_probs"]
    after2 = two.compute_log_prob(batch).batch["old_log_probs"]
    assert (after1 - before)[mask].abs().max() > 1e-3, "the update did not change the policy"
    torch.testing.assert_close(after2[mask], after1[mask], atol=2e-5, rtol=1e-4)
    # 2 epochs x 1 mini-batch = 2 optimizer steps on every rank; the global grad norm is the same
    assert len(m1["actor/grad_norm"]) == 2 and len(m2["actor/grad_norm"]) == 4
    assert m2["actor/grad_norm"][:2] == pytest.approx(m1["actor/grad_norm"], rel=1e-4)
    assert m1["actor/lr"] == [pytest.approx(5e-3)]
    # the reference policy does not move
    ref = two.compute_ref_log_prob(batch).batch["ref_log_prob"]
    torch.testing.assert_close(ref[mask], before[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # CI budget; test_fused_kernels_fsdp.py stays
def test_fused_kernels_reach_actor_and_reference_with_the_same_log_probs(groups, tiny_model_dir):
    one, _ = groups
    fused = make_group(make_config(tiny_model_dir, model={"use_fused_kernels": True}), 1)
    try:
        fused.init_model()
        assert fused.fused_flags() == [(True, True)]
        batch = make_batch(seed=4)
        mask = batch.batch["response_mask"].bool()
        unfused_ref = one.compute_ref_log_prob(batch).batch["ref_log_prob"]  # the initial weights, logits path
        scored = fused.compute_log_prob(batch).batch
        torch.testing.assert_close(scored["old_log_probs"][mask], unfused_ref[mask], atol=1e-5, rtol=1e-5)
        assert scored["entropys"][mask].min() > 0
        torch.testing.assert_close(
            fused.compute_ref_log_prob(batch).batch["ref_log_prob"][mask], unfused_ref[mask], atol=1e-5, rtol=1e-5
        )
    finally:
        fused.shutdown()
        fused.resource_pool.release()


def test_checkpoint_resume_gives_identical_next_update(groups, tmp_path):
    _, two = groups
    batch = with_old_log_probs(two, make_batch(seed=3))
    path = str(tmp_path / "global_step_1" / "actor")
    two.save_checkpoint(path, global_step=1, extra_state={"dataloader": {"epoch": 0, "index": 5}})
    first = two.update_actor(batch).meta_info["metrics"]
    lp_first = two.compute_log_prob(batch).batch["old_log_probs"]
    loaded = two.load_checkpoint(path)
    assert loaded == [{"global_step": 1, "extra_state": {"dataloader": {"epoch": 0, "index": 5}}}] * 2
    second = two.update_actor(batch).meta_info["metrics"]
    lp_second = two.compute_log_prob(batch).batch["old_log_probs"]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert second[key] == pytest.approx(first[key], abs=1e-6), key
    torch.testing.assert_close(lp_second, lp_first, atol=1e-6, rtol=0)
    files = set(os.listdir(path))
    assert {"dcp", "lr_scheduler.pt", "rng_rank0.pt", "rng_rank1.pt", "extra_state.pt", "huggingface"} <= files


@pytest.mark.slow  # CI budget
def test_async_checkpoint_holds_the_state_of_its_step_while_training_goes_on(ray_cluster, tiny_model_dir, tmp_path):
    config = make_config(
        tiny_model_dir, actor={"checkpoint": {"save_contents": ["model", "optimizer", "extra"], "async_save": True}}
    )
    group = make_group(config, 2)
    try:
        group.init_model()
        batch = with_old_log_probs(group, make_batch(seed=3))
        group.update_actor(batch)  # the optimizer has state to save
        path = tmp_path / "global_step_1" / "actor"
        group.save_checkpoint(str(path), global_step=1)
        assert not (path / "checkpoint_meta.json").exists()  # written only once the background write is done
        first = group.update_actor(batch).meta_info["metrics"]  # changes parameters and moments in place
        lp_first = group.compute_log_prob(batch).batch["old_log_probs"]
        assert group.wait_for_checkpoint() == [True, True]
        assert (path / "checkpoint_meta.json").is_file()
        assert group.wait_for_checkpoint() == [False, False]

        group.load_checkpoint(str(path))
        second = group.update_actor(batch).meta_info["metrics"]
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert second[key] == pytest.approx(first[key], abs=1e-6), key
        torch.testing.assert_close(group.compute_log_prob(batch).batch["old_log_probs"], lp_first, atol=1e-6, rtol=0)
    finally:
        group.shutdown()
        group.resource_pool.release()


def test_hf_export_loads_with_from_pretrained_and_gives_same_logits(groups, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, two = groups
    path = str(tmp_path / "ckpt")
    two.save_checkpoint(path, global_step=2)
    hf_dir = os.path.join(path, "huggingface")
    model = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    assert AutoTokenizer.from_pretrained(hf_dir).pad_token == "<pad>"
    batch = make_batch(seed=4)
    with torch.no_grad():
        logits = model(
            input_ids=batch.batch["input_ids"],
            attention_mask=batch.batch["attention_mask"],
            position_ids=batch.batch["position_ids"],
        ).logits
    expected = logprobs_from_logits(logits[:, -RESPONSE_LEN - 1 : -1].float(), batch.batch["responses"])
    got = two.compute_log_prob(batch).batch["old_log_probs"]
    mask = batch.batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)


def test_generate_sequences_layout(groups):
    _, two = groups
    prompts = make_prompts(3)  # 3 rows over 2 ranks: padded for dispatch, unpadded on return
    out = two.generate_sequences(prompts)
    b = out.batch
    assert len(out) == 3
    assert b["responses"].shape == (3, RESPONSE_LEN) and b["input_ids"].shape == (3, PROMPT_LEN + RESPONSE_LEN)
    assert torch.equal(b["prompts"], prompts.batch["input_ids"])
    assert torch.equal(b["input_ids"], torch.cat([b["prompts"], b["responses"]], dim=-1))
    assert torch.equal(b["attention_mask"][:, PROMPT_LEN:], b["response_mask"])
    assert torch.equal(
        b["position_ids"][:, PROMPT_LEN:], prompts.batch["position_ids"][:, -1:] + torch.arange(1, RESPONSE_LEN + 1)
    )
    lengths = b["response_mask"].sum(-1)
    assert (lengths >= 1).all()
    for i, n in enumerate(lengths.tolist()):  # right padded: ones then zeros
        assert b["response_mask"][i, :n].all() and not b["response_mask"][i, n:].any()
    assert set(out.non_tensor_batch["stop_reason"]) <= {"stop", "length"}
    assert b["rollout_log_probs"].shape == (3, RESPONSE_LEN)


def test_update_rollout_weights_syncs_engine_with_actor(groups):
    _, two = groups
    prompts = make_prompts(4, seed=5)
    out = two.generate_sequences(prompts)
    mask = out.batch["response_mask"].bool()
    actor_lp = two.compute_log_prob(out).batch["old_log_probs"]
    # the actor has been trained, the engine still runs the initial weights
    assert (out.batch["rollout_log_probs"] - actor_lp)[mask].abs().max() > 1e-3

    results = two.update_rollout_weights(7)
    checksums = two.actor_weights_checksum()
    assert [r["version"] for r in results] == [7, 7]
    assert [r["checksum"] for r in results] == checksums and len(set(checksums)) == 1
    assert two.get_rollout_version() == [7, 7]

    out = two.generate_sequences(prompts)
    mask = out.batch["response_mask"].bool()
    actor_lp = two.compute_log_prob(out).batch["old_log_probs"]
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], actor_lp[mask], atol=1e-4, rtol=1e-4)


def test_checkpoint_engine_naive_backend_loads_the_local_engines(groups):
    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.workers.config import RolloutConfig

    _, two = groups
    manager = CheckpointEngineManager.from_config(RolloutConfig(update_weights_bucket_megabytes=1), trainer=two)
    report = manager.update_weights(9)
    assert report["version"] == 9 and set(report["replicas"]) == {"rank0/local0", "rank1/local0"}
    assert two.get_rollout_version() == [9, 9]
    results = two.update_rollout_weights(7)  # back to the version the next test expects
    assert [r["version"] for r in results] == [7, 7]


def test_worker_replicas_serve_token_requests_concurrently(groups):
    from verl.workers.rollout.replica import worker_rank_replicas

    _, two = groups
    replicas = worker_rank_replicas(two)
    prompt = make_prompts(1, seed=8).batch["input_ids"][0].tolist()
    greedy = {"max_tokens": 4, "do_sample": False, "logprobs": True}

    async def run():
        await replicas[1].sleep()
        await replicas[1].wake_up()
        outs = await asyncio.gather(*[replicas[i % 2].generate(prompt, greedy, f"req-{i}") for i in range(4)])
        return outs, [await r.get_version() for r in replicas]

    outs, versions = asyncio.run(run())
    assert versions == [7, 7]
    assert all(1 <= len(o.token_ids) <= 4 and len(o.log_probs) == len(o.token_ids) for o in outs)
    # same weights on both ranks, greedy decoding: every replica answers the same
    assert all(o.token_ids == outs[0].token_ids for o in outs)


def test_missing_model_path_fails_naming_the_path(ray_cluster, tmp_path):
    bad = str(tmp_path / "no_such_model")
    pool = RayResourcePool([1], use_gpu=False)
    try:  # the worker's constructor resolves the path, so the group's start-up reports it, naming the rank
        with pytest.raises(WorkerError, match=r"rank 0 .* died during __init__\(\)(.|\n)*no_such_model"):
            RayWorkerGroup(pool, RayClassWithInitArgs(ProbeActorWorker, config=make_config(bad), role="actor"))
    finally:
        pool.release()


@pytest.fixture(scope="module")
def lora_group(ray_cluster, tiny_model_dir):
    config = make_config(tiny_model_dir, model={"lora_rank": 4, "lora_alpha": 8}, actor={"optim": {"lr": 5e-2}})
    group = make_group(config, 2)
    group.init_model()
    yield group
    group.shutdown()
    group.resource_pool.release()


def test_lora_trains_only_adapters_and_rollout_gets_merged_weights(lora_group):
    names = lora_group.trainable_names()[0]
    assert names and all("lora_" in n for n in names)
    before = lora_group.actor_state()[0]
    batch = with_old_log_probs(lora_group, make_batch(seed=6))
    initial = batch.batch["old_log_probs"]
    lora_group.update_actor(batch)
    after = lora_group.actor_state()[0]
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all("lora_" in n for n in changed)
    mask = batch.batch["response_mask"].bool()
    # the reference is the actor with adapters disabled: still the initial policy
    ref = lora_group.compute_ref_log_prob(batch).batch["ref_log_prob"]
    torch.testing.assert_close(ref[mask], initial[mask], atol=1e-5, rtol=1e-5)
    results = lora_group.update_rollout_weights(1)
    assert results[0]["checksum"] == lora_group.actor_weights_checksum()[0]
    out = lora_group.generate_sequences(make_prompts(4, seed=7))
    out_mask = out.batch["response_mask"].bool()
    actor_lp = lora_group.compute_log_prob(out).batch["old_log_probs"]
    torch.testing.assert_close(out.batch["rollout_log_probs"][out_mask], actor_lp[out_mask], atol=1e-4, rtol=1e-4)
    ref_lp = lora_group.compute_ref_log_prob(out).batch["ref_log_prob"]
    assert (ref_lp - actor_lp)[out_mask].abs().max() > 1e-4, "merged LoRA weights did not reach the rollout"


@pytest.mark.gpu
def test_gpu_worker_scores_trains_and_syncs_in_bfloat16(ray_cluster, tiny_model_dir):
    config = make_config(tiny_model_dir, trainer={"device": "cuda"})
    pool = RayResourcePool([1], use_gpu=True)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ProbeActorWorker, config=config, role="actor_rollout_ref"))
    try:
        group.init_model()
        out = group.generate_sequences(make_prompts(4))
        mask = out.batch["response_mask"].bool()
        actor_lp = group.compute_log_prob(out).batch["old_log_probs"]
        # bfloat16 compute on both sides: close, not bit-equal
        assert (actor_lp - out.batch["rollout_log_probs"])[mask].abs().mean() < 0.05
        batch = with_old_log_probs(group, make_batch(seed=2))
        metrics = group.update_actor(batch).meta_info["metrics"]
        assert all(math.isfinite(v) for v in metrics["actor/grad_norm"])
        assert [r["version"] for r in group.update_rollout_weights(1)] == [1]
    finally:
        group.shutdown()
        pool.release()
