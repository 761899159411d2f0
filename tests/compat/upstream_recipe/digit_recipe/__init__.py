"""A recipe written the way verl's public recipes are: its own trainer subclass, agent loop, reward file and
Hydra entry point, importing only verl's public names (tests/compat/test_upstream_recipe.py runs it)."""
