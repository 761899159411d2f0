"""verl's ``ppo.v1`` namespace. Here it holds the advantage helpers for agent loops that return several
trajectories (sessions) per sample (:mod:`verl.trainer.ppo.v1.utils`); verl's TransferQueue-based v1 trainers
are not part of this package (our trainers are :mod:`verl.trainer.ppo.ray_trainer` and the async recipes)."""
