"""``python -m dapo_style.main_dapo_style key=value ...``: the recipe's own task runner builds the roles, pools,
data sets and trainer from verl's ``BaseTaskRunner`` steps, then runs the recipe's ``fit()``."""

from __future__ import annotations

import hydra
import ray
from omegaconf import OmegaConf

from verl.trainer.main_ppo_v0 import BaseTaskRunner
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
from verl.utils import hf_tokenizer
from verl.utils.config import validate_config
from verl.utils.dataset.rl_dataset import collate_fn
from verl.utils.fs import copy_to_local


class DapoStyleTaskRunner(BaseTaskRunner):
    def run(self, config):
        from dapo_style.trainer import DapoStyleTrainer

        OmegaConf.resolve(config)
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))

        tokenizer = hf_tokenizer(copy_to_local(config.actor_rollout_ref.model.path))
        train_dataset = create_rl_dataset(
            config.data.train_files, config.data, tokenizer, None, is_train=True, max_samples=-1
        )
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
        trainer = DapoStyleTrainer(
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


@hydra.main(config_path="config", config_name="dapo_style_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(DapoStyleTaskRunner))


if __name__ == "__main__":
    main()
