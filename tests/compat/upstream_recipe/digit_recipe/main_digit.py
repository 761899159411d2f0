"""``python -m digit_recipe.main_digit key=value ...``: GRPO with the recipe's trainer and agent loop."""

from __future__ import annotations

import hydra
import ray

from verl.trainer.main_ppo import TaskRunner, create_rl_dataset, create_rl_sampler, run_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import hf_tokenizer
from verl.utils.dataset.rl_dataset import collate_fn
from verl.utils.fs import copy_to_local


class DigitTrainer(RayPPOTrainer):
    """Overrides one stage: the actor update also reports how many rows the recipe's agent loop produced."""

    def _update_actor(self, batch):
        output = super()._update_actor(batch)
        tags = batch.non_tensor_batch.get("recipe_agent", [])
        output.meta_info["metrics"]["recipe/agent_rows"] = [float(sum(tag == "digit_agent" for tag in tags))]
        return output


class DigitTaskRunner(TaskRunner):
    def run(self, config):
        from digit_recipe import agent  # noqa: F401  (registers the agent loop in this process)

        local_path = copy_to_local(config.actor_rollout_ref.model.path)
        tokenizer = hf_tokenizer(local_path)
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        resource_pool_manager = self.init_resource_pool_mgr(config)
        train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
        val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
        trainer = DigitTrainer(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(config.data, train_dataset),
        )
        trainer.init_workers()
        trainer.fit()


@hydra.main(config_path="config", config_name="digit_trainer", version_base=None)
def main(config):
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(DigitTaskRunner))


if __name__ == "__main__":
    main()
