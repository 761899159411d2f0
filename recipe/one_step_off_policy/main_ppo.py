"""Entry point of the one-step-off recipe (the trainer lives in ``verl.experimental.one_step_off_policy``)."""

from pathlib import Path

from recipe._entry import recipe_main

CONFIG_DIR = Path(__file__).parent / "config"
CONFIG_NAME = "one_step_off_ppo_trainer"


def main(argv=None) -> dict:
    return recipe_main(CONFIG_DIR, CONFIG_NAME, "one_step_off", argv)


if __name__ == "__main__":
    main()
