"""verl's ``verl.single_controller.ray.megatron``: worker groups that hand Megatron ranks their parallel layout.

Megatron-LM workers are not part of this build (it trains with FSDP2 only), so these groups import, subclass
:class:`RayWorkerGroup`, and raise ``MissingExtraError`` when built. Use ``RayWorkerGroup`` for the FSDP workers.
"""

from verl.models.mcore._missing import megatron_class
from verl.single_controller.ray.worker_group import RayWorkerGroup

__all__ = ["MegatronRayWorkerGroup", "NVMegatronRayWorkerGroup"]

NVMegatronRayWorkerGroup = megatron_class("NVMegatronRayWorkerGroup", __name__, base=RayWorkerGroup)
MegatronRayWorkerGroup = megatron_class("MegatronRayWorkerGroup", __name__, base=RayWorkerGroup)
