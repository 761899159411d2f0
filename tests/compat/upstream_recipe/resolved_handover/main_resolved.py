"""``python -m resolved_handover.main_resolved key=value ...``: a recipe whose own ``main`` resolves the composed
config before handing it to verl's ``run_ppo``, as many recipes do."""

from __future__ import annotations

import hydra
from omegaconf import OmegaConf


@hydra.main(config_path="config", config_name="resolved_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import run_ppo

    OmegaConf.resolve(config)
    # what the recipe reads before the hand-over follows what its YAML and command line set
    assert config.actor_rollout_ref.actor.rollout_n == config.actor_rollout_ref.rollout.n, "mirror out of step"
    run_ppo(config)


if __name__ == "__main__":
    main()
