"""Entry point of the fully-async recipe (the machinery lives in ``verl.experimental.fully_async_policy``)."""

from pathlib import Path

from recipe._entry import recipe_main

CONFIG_DIR = Path(__file__).parent / "config"
CONFIG_NAME = "fully_async_ppo_trainer"


def main(argv=None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "fully_async", argv)


if __name__ == "__main__":
    main()
