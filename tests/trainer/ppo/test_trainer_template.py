"""RayPPOTrainer holds the PPO step as a template of stages; SeparateRayPPOTrainer and the async recipes reuse it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.trainer.config import PPOConfig, TrainerConfig
from verl.trainer.config.resolve import as_ppo_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, StopTraining, generation_seed
from verl.workers.config import RolloutConfig

STAGES = (
    "_fit_get_batch",
    "_fit_generate",
    "_fit_compute_reward",
    "_fit_compute_log_prob",
    "_fit_compute_ref_log_prob",
    "_fit_compute_critic",
    "_fit_compute_advantage",
    "_fit_update_critic",
    "_fit_update_actor",
    "_fit_update_weights",
    "_fit_validate",
    "_fit_save_checkpoint",
    "_fit_collect_metrics",
    "fit_step",
    "fit",
)
WORKER_CALLS = (
    "_compute_old_log_prob",
    "_compute_ref_log_prob",
    "_compute_values",
    "_update_actor",
    "_update_critic",
    "_balance_batch",
    "_validate",
    "_save_checkpoint",
    "_load_checkpoint",
    "_get_gen_batch",
    "init_workers",
)


def test_every_stage_lives_in_ray_ppo_trainer_and_the_separate_trainer_reuses_it():
    for name in STAGES + WORKER_CALLS:
        assert name in vars(RayPPOTrainer), name
    assert issubclass(SeparateRayPPOTrainer, RayPPOTrainer)
    # the separate trainer only says how the rollout is built and how weights reach it; its fit_step runs the
    # template's between verl's step hooks (_fit_prepare_step ... _fit_postprocess_step)
    assert not set(vars(SeparateRayPPOTrainer)) & (set(STAGES) - {"fit_step"})


def test_async_recipes_reuse_the_template_stages():
    from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
    from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer

    compute_stages = {
        "_fit_compute_reward",
        "_fit_compute_log_prob",
        "_fit_compute_ref_log_prob",
        "_fit_compute_critic",
        "_fit_compute_advantage",
        "_fit_update_critic",
        "fit_step",
        "_compute_old_log_prob",
        "_update_actor",
    }
    # the fully-async trainer chooses the weights the template's pass runs under (those that generated each row)
    allowed = {FullyAsyncTrainer: {"_compute_old_log_prob"}, OneStepOffRayTrainer: set()}
    for cls in (FullyAsyncTrainer, OneStepOffRayTrainer):
        assert issubclass(cls, SeparateRayPPOTrainer)
        assert not (compute_stages - allowed[cls]) & set(vars(cls)), f"{cls.__name__} rewrites a compute stage"


def test_separate_trainer_without_rollout_says_what_is_missing():
    trainer = object.__new__(SeparateRayPPOTrainer)
    with pytest.raises(NotImplementedError, match="SeparateRayPPOTrainer must implement _init_rollout"):
        trainer._init_rollout(None)
    with pytest.raises(NotImplementedError, match="SeparateRayPPOTrainer must implement _generate_sequences"):
        trainer._generate_sequences(None)
    trainer.weight_sync, trainer.weight_version = None, 0
    with pytest.raises(RuntimeError, match="no weight_sync"):
        trainer._push_weights({})


def test_role_mapping_without_actor_is_refused_by_name():
    config = OmegaConf.create(
        {
            "critic": {},
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False, "rollout_correction": {}},
            "actor": {"use_kl_loss": False},
            "trainer": {},
        }
    )
    with pytest.raises(ValueError, match="role_worker_mapping needs an actor role"):
        RayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None)


def _seeds(rollout_seed, trainer_seed):
    return OmegaConf.create({"rollout": {"seed": rollout_seed}, "trainer": {"seed": trainer_seed}})


def test_generation_seed_is_per_step_and_optional():
    assert generation_seed(_seeds(None, None), 3) is None
    assert generation_seed(_seeds(None, 7), 2) == generation_seed(_seeds(7, 1), 2)
    typed = PPOConfig(rollout=RolloutConfig(seed=7))
    assert generation_seed(typed, 2) == generation_seed(_seeds(7, 1), 2)
    assert generation_seed(PPOConfig(), 2) == generation_seed(_seeds(None, PPOConfig().trainer.seed), 2)
    seeded = _seeds(7, None)
    assert generation_seed(seeded, 1) != generation_seed(seeded, 2)
    assert generation_seed(seeded, 2) == generation_seed(seeded, 2)
    assert issubclass(StopTraining, Exception)


def _log_prob_trainer(correction=None, cls=RayPPOTrainer, kl_in_reward=False, **actor):
    trainer = object.__new__(cls)
    trainer.bypass_mode, trainer.global_steps, trainer.metrics = False, 1, {}
    trainer.config = OmegaConf.create(
        {
            "data": {"train_batch_size": 256},
            "actor": {"ppo_epochs": 1, "ppo_mini_batch_size": 4, "skip_on_policy_log_prob": True, **actor},
            "rollout": {"n": 2},
            "trainer": {"critic_warmup": 0},
            "algorithm": {"use_kl_in_reward": kl_in_reward, "rollout_correction": correction or {"rollout_is": None}},
        }
    )
    for group in ("actor", "ref", "critic"):  # what the composed config interpolates from rollout.n
        trainer.config[group] = {**trainer.config.get(group, {}), "rollout_n": 2}
    trainer.ppo_config = as_ppo_config(trainer.config)
    return trainer


def _batch(rows: int, rollout_log_probs: bool = False):
    import torch

    from verl.protocol import DataProto

    tensors = {"responses": torch.zeros(rows, 3, dtype=torch.long)}
    if rollout_log_probs:
        tensors["rollout_log_probs"] = torch.zeros(rows, 3)
    return DataProto.from_dict(tensors)


def test_on_policy_update_skips_the_old_log_prob_pass():
    """One epoch over one mini-batch: no separate pass (no worker group is touched); anything else runs it."""
    on_policy = _log_prob_trainer()
    batch = _batch(8)
    assert on_policy._fit_compute_log_prob(batch) is batch and "old_log_probs" not in batch.batch.keys()
    needs_pass = [
        (_log_prob_trainer(ppo_epochs=2), _batch(8)),
        (_log_prob_trainer(ppo_mini_batch_size=2), _batch(8)),  # two mini-batches: the second is off-policy
        (_log_prob_trainer(skip_on_policy_log_prob=False), _batch(8)),
        # corrections that look at the whole batch before the update
        (_log_prob_trainer({"rollout_rs": "token", "rollout_rs_threshold": 2.0}), _batch(8, rollout_log_probs=True)),
        (_log_prob_trainer({"rollout_token_veto_threshold": 1e-3}), _batch(8, rollout_log_probs=True)),
        (
            _log_prob_trainer({"rollout_is": "token", "rollout_is_batch_normalize": True}),
            _batch(8, rollout_log_probs=True),
        ),
    ]
    needs_pass.append((_log_prob_trainer(kl_in_reward=True), _batch(8)))
    for trainer, data in needs_pass:
        assert not trainer._update_supplies_old_log_probs(data), trainer.config


def test_token_weighting_correction_is_left_to_the_on_policy_update():
    from verl.trainer.ppo.rollout_corr import IN_UPDATE_KEY

    trainer = _log_prob_trainer({"rollout_is": "sequence", "rollout_is_threshold": 3.0})
    batch = _batch(8, rollout_log_probs=True)
    assert trainer._fit_compute_log_prob(batch) is batch and "old_log_probs" not in batch.batch.keys()
    assert batch.meta_info[IN_UPDATE_KEY] == {"rollout_is": "sequence", "rollout_is_threshold": 3.0}
    plain = _batch(8)
    _log_prob_trainer()._fit_compute_log_prob(plain)
    assert IN_UPDATE_KEY not in plain.meta_info


def test_a_recipe_that_overrides_compute_old_log_prob_always_gets_its_pass():
    """The on-policy shortcut must not silently bypass a recipe's own ``_compute_old_log_prob``."""
    import torch

    from verl.protocol import DataProto

    class Recipe(RayPPOTrainer):
        def _compute_old_log_prob(self, batch):
            return DataProto.from_dict({"old_log_probs": torch.full((len(batch), 3), -0.5)}), 0.25

    trainer = _log_prob_trainer(cls=Recipe)
    batch = _batch(8)
    assert RayPPOTrainer._update_supplies_old_log_probs(_log_prob_trainer(), batch)
    out = trainer._fit_compute_log_prob(batch)
    assert torch.equal(out.batch["old_log_probs"], torch.full((8, 3), -0.5))
    assert trainer.metrics["perf/mfu/actor_infer"] == 0.25


def _slow_start_actor_cls():
    """An actor worker whose constructor outlasts a 1 s start-up limit (pickled by value to the Ray worker)."""
    from verl.single_controller.base import Worker

    class SlowStartActor(Worker):
        def __init__(self, config, role):
            super().__init__()
            import time

            time.sleep(60)

    return SlowStartActor


def test_trainer_bounds_worker_startup_by_ray_wait_register_center_timeout(ray_cluster):
    from verl.single_controller.ray import RayWorkerGroup, ResourcePoolManager, WorkerTimeoutError
    from verl.trainer.ppo.roles import Role

    manager = ResourcePoolManager({"main": [1]}, {Role.ActorRollout: "main"}, device="cpu")
    manager.create_resource_pool()
    trainer = object.__new__(RayPPOTrainer)
    trainer.ppo_config = PPOConfig(trainer=TrainerConfig(ray_wait_register_center_timeout=1))
    trainer.total_training_steps = 1
    trainer.role_worker_mapping = {Role.ActorRollout: _slow_start_actor_cls()}
    trainer.resource_pool_manager, trainer.ray_worker_group_cls = manager, RayWorkerGroup
    trainer.use_critic = trainer.use_reference_policy = trainer.ref_in_actor = trainer.use_rm = False
    try:
        with pytest.raises(
            WorkerTimeoutError,
            match=r"Colocated_actor_rollout worker group: 0 of 1 workers started "
            r"within 1s \(trainer.ray_wait_register_center_timeout\)",
        ):
            trainer._init_trainer_workers()
    finally:
        for pool in manager.resource_pool_dict.values():
            pool.release()


def _config_probe_cls():
    """A worker that reports the config object it was built with (pickled by value to the Ray worker)."""
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class ConfigProbe(Worker):
        def __init__(self, config, role):
            super().__init__()
            self.config = config

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def init_model(self):
            pass

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def config_seen(self):
            optim_steps = (self.config.actor.optim.total_training_steps, self.config.critic.optim.total_training_steps)
            return type(self.config).__module__, type(self.config).__name__, optim_steps, self.config.trainer.seed

    return ConfigProbe


def test_workers_receive_the_typed_config_with_the_run_s_step_count(ray_cluster):
    """Every worker gets the trainer's PPOConfig (not a DictConfig to re-read), with ``total_training_steps`` given
    to the optimizers the user left unset (a cosine schedule needs it) and kept where the user set it."""
    from verl.single_controller.ray import RayWorkerGroup, ResourcePoolManager
    from verl.trainer.ppo.roles import Role
    from verl.workers.config import FSDPCriticConfig, OptimizerConfig

    manager = ResourcePoolManager({"main": [1]}, {Role.ActorRollout: "main"}, device="cpu")
    manager.create_resource_pool()
    trainer = object.__new__(RayPPOTrainer)
    trainer.ppo_config = PPOConfig(
        trainer=TrainerConfig(seed=11), critic=FSDPCriticConfig(optim=OptimizerConfig(total_training_steps=5))
    )
    trainer.total_training_steps = 12
    trainer.role_worker_mapping = {Role.ActorRollout: _config_probe_cls()}
    trainer.resource_pool_manager, trainer.ray_worker_group_cls = manager, RayWorkerGroup
    trainer.use_critic = trainer.use_reference_policy = trainer.ref_in_actor = trainer.use_rm = False
    try:
        trainer._init_trainer_workers()
        seen = trainer.actor_rollout_wg.config_seen()
    finally:
        for pool in manager.resource_pool_dict.values():
            pool.release()
    assert seen == [("verl.trainer.config.ppo_config", "PPOConfig", (12, 5), 11)]
    assert trainer.ppo_config.actor.optim.total_training_steps == -1  # the trainer's own copy is not modified


def test_a_curriculum_sampler_and_the_data_set_see_every_finished_step():
    from types import SimpleNamespace

    from verl.experimental.dataset.sampler import AbstractCurriculumSampler

    class Curriculum(AbstractCurriculumSampler):
        def __init__(self):
            self.seen = []

        def __iter__(self):
            return iter(())

        def __len__(self):
            return 0

        def update(self, batch):
            self.seen.append(len(batch))

    class Rows:
        def __init__(self):
            self.ends = []

        def on_batch_end(self, batch):
            self.ends.append(len(batch))

    trainer = object.__new__(RayPPOTrainer)
    trainer.train_dataloader, trainer.train_dataset = SimpleNamespace(sampler=Curriculum()), Rows()
    trainer._fit_experimental(_batch(6))
    assert trainer.train_dataloader.sampler.seen == [6] and trainer.train_dataset.ends == [6]
    trainer.train_dataloader, trainer.train_dataset = SimpleNamespace(sampler=None), object()
    trainer._fit_experimental(_batch(6))  # plain samplers and data sets have nothing to update


def test_a_subclass_init_that_skips_ours_gets_the_trainer_state(tiny_model_dir):
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.demo import prepare_demo_data
    from verl.trainer.ppo.ray_trainer import Role
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import collate_fn

    files = prepare_demo_data()
    config = compose_ppo_config(
        [
            "algorithm.adv_estimator=gae",
            f"data.train_files={files['train']}",
            f"data.val_files={files['test']}",
            "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
        ]
    )
    tokenizer = hf_tokenizer(str(tiny_model_dir))

    class OwnInitTrainer(RayPPOTrainer):
        def __init__(self, config, tokenizer):  # verl-era recipes set what they need and skip the parent's
            self.config = config
            self.tokenizer = tokenizer
            self.role_worker_mapping = {Role.ActorRollout: object}
            self.resource_pool_manager = None
            self.use_critic = False  # what the recipe sets is kept
            train = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
            val = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
            self._create_dataloader(train, val, collate_fn, None)

    trainer = OwnInitTrainer(config, tokenizer)
    assert trainer.ppo_config.data.train_batch_size == 16
    assert trainer.total_training_steps == len(trainer.train_dataloader) * trainer.ppo_config.trainer.total_epochs
    assert trainer.use_critic is False and trainer.ppo_config.use_critic is True  # gae: ours would say True
    assert trainer.global_steps == 0 and trainer.metrics == {} and trainer.checkpointer is not None
    assert trainer.group_filter is None and trainer.processor is None
    with pytest.raises(AttributeError, match="no attribute 'not_a_trainer_attribute'"):
        trainer.not_a_trainer_attribute  # noqa: B018
