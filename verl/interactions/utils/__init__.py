"""Helpers of verl's interaction package (the registry that builds interactions from a config file)."""
