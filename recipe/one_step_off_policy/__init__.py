"""One-step-off-policy PPO recipe: ``python -m recipe.one_step_off_policy.main_ppo key=value ...``."""
