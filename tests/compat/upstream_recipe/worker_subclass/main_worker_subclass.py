"""``python -m worker_subclass.main_worker_subclass key=value ...``: verl's PPO task runner with the recipe's worker
class mapped to the actor/rollout role."""

from __future__ import annotations

import hydra
import ray

from verl.trainer.main_ppo import TaskRunner, run_ppo
from verl.trainer.ppo.utils import Role


class AuxHeadTaskRunner(TaskRunner):
    def add_actor_rollout_worker(self, config):
        from worker_subclass.aux_worker import AuxHeadWorker

        _, ray_worker_group_cls = super().add_actor_rollout_worker(config)
        self.role_worker_mapping[Role.ActorRollout] = ray.remote(AuxHeadWorker)
        return AuxHeadWorker, ray_worker_group_cls


@hydra.main(config_path="config", config_name="worker_subclass_trainer", version_base=None)
def main(config):
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(AuxHeadTaskRunner))


if __name__ == "__main__":
    main()
