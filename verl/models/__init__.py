"""verl's ``verl.models`` package: model-level helpers recipes import.

This package trains Hugging Face models as they are (FSDP2 over ``AutoModelForCausalLM``), so there are no model
re-implementations here: :mod:`verl.models.registry` says which architectures padding removal serves,
:mod:`verl.models.transformers` holds verl's Hugging Face helpers, and :mod:`verl.models.mcore` (Megatron-Core
models) imports but is not part of this build.
"""
