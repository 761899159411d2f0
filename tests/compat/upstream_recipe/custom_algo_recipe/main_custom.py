"""``python -m custom_algo_recipe.main_custom key=value ...``: verl's PPO trainer with the recipe's estimator and
policy loss (``algos.py``), selected on the command line like any built-in one."""

from __future__ import annotations

import hydra

from custom_algo_recipe import algos  # noqa: F401  (registers the estimator and the loss in the driver too)
from verl.trainer.main_ppo import run_ppo


@hydra.main(config_path="config", config_name="custom_trainer", version_base=None)
def main(config):
    run_ppo(config)


if __name__ == "__main__":
    main()
