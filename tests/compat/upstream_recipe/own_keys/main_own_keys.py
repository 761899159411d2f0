"""``python -m own_keys.main_own_keys key=value ...``: a recipe with keys and a config class of its own. Its task
runner reads its keys from the config it is handed and builds DAPO's reward manager with the overlong buffer of its
YAML; its trainer logs what it reads from the config objects the trainer hands it."""

from __future__ import annotations

import hydra
import ray

from verl.trainer.main_ppo_v0 import BaseTaskRunner, RayPPOTrainer
from verl.trainer.ppo.reward import load_reward_manager
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
from verl.utils import hf_tokenizer
from verl.utils.dataset.rl_dataset import collate_fn
from verl.utils.fs import copy_to_local


class OwnKeysTrainer(RayPPOTrainer):
    def _fit_compute_reward(self, batch):
        from own_keys.config_classes import BonusActorConfig

        batch = super()._fit_compute_reward(batch)
        schedule = self.config.algorithm.bonus_schedule  # the recipe's DictConfig
        self.metrics["recipe/length_bonus"] = float(self.config.algorithm.length_bonus)
        self.metrics["recipe/length_bonus_typed"] = float(self.ppo_config.algorithm.length_bonus)  # our config object
        self.metrics["recipe/bonus_every"] = float(self.ppo_config.algorithm.bonus_schedule.every)
        self.metrics["recipe/bonus_floor"] = float(self.ppo_config.actor.bonus_floor)
        self.metrics["recipe/own_actor_config"] = float(isinstance(self.ppo_config.actor, BonusActorConfig))
        self.metrics["recipe/bonus_on"] = float(self.global_steps >= schedule.start)
        return batch


class OwnKeysTaskRunner(BaseTaskRunner):
    def run(self, config):
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        tokenizer = hf_tokenizer(copy_to_local(config.actor_rollout_ref.model.path))
        reward_fn, val_reward_fn = (
            load_reward_manager(
                config,
                tokenizer,
                num_examine,
                max_resp_len=config.data.max_response_length,
                overlong_buffer_cfg=config.reward_model.overlong_buffer,
            )
            for num_examine in (0, 1)
        )
        train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
        trainer = OwnKeysTrainer(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=ray_worker_group_cls,
            reward_fn=reward_fn,
            val_reward_fn=val_reward_fn,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_dataset),
        )
        trainer.init_workers()
        trainer.fit()
        return config.trainer.default_local_dir


@hydra.main(config_path="config", config_name="own_keys_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(OwnKeysTaskRunner))


if __name__ == "__main__":
    main()
