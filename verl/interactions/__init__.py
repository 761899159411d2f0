"""verl's ``verl.interactions`` package: simulated users for multi-turn rollouts.

The implementation is the agent loop's (:mod:`verl.experimental.agent_loop.interaction`); this package keeps verl's
import paths (``verl.interactions.base.BaseInteraction``,
``verl.interactions.utils.interaction_registry.initialize_interactions_from_config``).
"""

from verl.interactions.base import BaseInteraction

__all__ = ["BaseInteraction"]
