"""Fully-async PPO recipe: ``python -m recipe.fully_async_policy.fully_async_main key=value ...``."""
