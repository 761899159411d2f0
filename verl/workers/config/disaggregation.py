"""verl's prefill/decode disaggregation settings (``rollout.disaggregation``), which this build does not implement:
the block is accepted and has no effect (``inert_keys.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig

__all__ = ["DisaggregationConfig"]


@dataclass
class DisaggregationConfig(BaseConfig):
    """Prefill and decode on separate replicas (``prefill_replicas`` / ``decode_replicas``, decode tensor parallel
    size, KV-cache ``transfer_backend`` and its connection settings)."""

    enabled: bool = False
    prefill_replicas: int = 1
    decode_replicas: int = 1
    decode_tensor_model_parallel_size: int | None = None
    transfer_backend: str = "nixl"
    bootstrap_port: int | None = None
    ib_device: str | None = None
    mooncake_protocol: str = "nvlink"
