"""verl's ``verl.third_party.sglang.parallel_state``: tensor-parallel groups for an SGLang engine running inside
the trainer's ranks (verl's SPMD SGLang rollout, removed upstream in verl 0.5).

This package serves SGLang as a server behind ``rollout.name=sglang`` instead, whose parallelism SGLang sets up
itself, so these functions import and raise ``MissingExtraError`` when called.
"""

from verl.utils.extras import unavailable_function

__all__ = [
    "ensure_model_parallel_initialized",
    "get_device_mesh",
    "get_tensor_model_parallel_group",
    "get_tensor_model_parallel_rank",
    "get_tensor_model_parallel_src_rank",
    "get_tensor_model_parallel_world_size",
    "initialize_model_parallel",
    "initialize_model_parallel_for_sglang",
    "initialize_parallel_state",
    "model_parallel_is_initialized",
]

_FEATURE = "verl's in-trainer (SPMD) SGLang rollout"
_REASON = "SGLang runs as its own server here (rollout.name=sglang), which sets up its parallel groups itself"


def _missing(name: str):
    return unavailable_function(name, __name__, _FEATURE, extra="sglang", reason=_REASON)


initialize_parallel_state = _missing("initialize_parallel_state")
ensure_model_parallel_initialized = _missing("ensure_model_parallel_initialized")
model_parallel_is_initialized = _missing("model_parallel_is_initialized")
initialize_model_parallel_for_sglang = _missing("initialize_model_parallel_for_sglang")
initialize_model_parallel = _missing("initialize_model_parallel")
get_device_mesh = _missing("get_device_mesh")
get_tensor_model_parallel_group = _missing("get_tensor_model_parallel_group")
get_tensor_model_parallel_world_size = _missing("get_tensor_model_parallel_world_size")
get_tensor_model_parallel_rank = _missing("get_tensor_model_parallel_rank")
get_tensor_model_parallel_src_rank = _missing("get_tensor_model_parallel_src_rank")
