"""verl's ``verl.utils.megatron`` helpers for the Megatron-LM backend.

This build trains with FSDP2 only: the submodules (``dist_checkpointing``, ``optimizer``, ``tensor_parallel``,
``pipeline_parallel``, ``sequence_parallel``, ``memory``) import so that recipes load, and each of their names raises
``MissingExtraError`` when used.
"""
