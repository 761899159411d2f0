"""Older path of the async recipes' shared command line (now ``verl.experimental.separation.entry``)."""

from verl.experimental.separation.entry import compose_recipe_config, recipe_main

__all__ = ["compose_recipe_config", "recipe_main"]
