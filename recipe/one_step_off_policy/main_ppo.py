"""Older path of the one-step-off recipe: ``python -m recipe.one_step_off_policy.main_ppo`` runs
``verl.experimental.one_step_off_policy.main_ppo`` (verl's path)."""

from verl.experimental.one_step_off_policy.main_ppo import CONFIG_DIR, CONFIG_NAME, main

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "main"]

if __name__ == "__main__":
    main()
