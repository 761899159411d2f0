"""Critics: the interface workers use and its data-parallel implementation.

``verl.workers.critic.value_model`` (which imports transformers) is not imported here.
"""

from verl.workers.critic.base import BasePPOCritic
from verl.workers.critic.dp_critic import DataParallelPPOCritic

__all__ = ["BasePPOCritic", "DataParallelPPOCritic"]
