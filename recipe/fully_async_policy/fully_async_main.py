"""Older path of the fully-async recipe: ``python -m recipe.fully_async_policy.fully_async_main`` runs
``verl.experimental.fully_async_policy.fully_async_main`` (verl's path)."""

from verl.experimental.fully_async_policy.fully_async_main import CONFIG_DIR, CONFIG_NAME, main

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "main"]

if __name__ == "__main__":
    main()
