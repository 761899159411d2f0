"""``python -m judge_pool.main_judge key=value ...``: GRPO whose reward comes from the recipe's judge worker, placed
on a ``judge_pool`` of its own by the recipe's overrides of verl's task-runner steps."""

from __future__ import annotations

import hydra
import ray
from omegaconf import OmegaConf

from verl.trainer.main_ppo_v0 import BaseTaskRunner, RayPPOTrainer
from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
from verl.utils import hf_tokenizer
from verl.utils.config import validate_config
from verl.utils.dataset.rl_dataset import collate_fn
from verl.utils.fs import copy_to_local

JUDGE_POOL = "judge_pool"


class JudgeTrainer(RayPPOTrainer):
    """Reports which process scored the step, so a run can show the judge ran on its own pool."""

    def _fit_compute_reward(self, batch):
        batch = super()._fit_compute_reward(batch)
        self.metrics["recipe/judge_world_size"] = float(self.rm_wg.world_size)
        return batch


class JudgeTaskRunner(BaseTaskRunner):
    def add_reward_model_resource_pool(self, config):
        from judge_pool.judge_worker import DigitJudgeWorker

        if config.reward.reward_model.enable:
            self.role_worker_mapping[Role.RewardModel] = ray.remote(DigitJudgeWorker)
            self.mapping[Role.RewardModel] = JUDGE_POOL

    def init_resource_pool_mgr(self, config):
        spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
        if Role.RewardModel in self.mapping:
            rm = config.reward.reward_model
            spec[JUDGE_POOL] = [rm.n_gpus_per_node] * rm.nnodes
        return ResourcePoolManager(resource_pool_spec=spec, mapping=self.mapping)

    def run(self, config):
        OmegaConf.resolve(config)
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))

        tokenizer = hf_tokenizer(copy_to_local(config.actor_rollout_ref.model.path))
        train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
        trainer = JudgeTrainer(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_dataset),
        )
        trainer.init_workers()
        trainer.fit()
        return config.trainer.default_local_dir


@hydra.main(config_path="config", config_name="judge_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(JudgeTaskRunner))


if __name__ == "__main__":
    main()
