"""Recipes: thin entry points and configs on top of the verl package (one folder per algorithm)."""
