"""``python -m verl.model_merger``: training checkpoints -> Hugging Face model folders (docs/offline.md).

``merge --backend fsdp --local_dir <ckpt> --target_dir <out>`` reads the sharded model of a PPO checkpoint
(``.../global_step_{k}/actor``) or of an SFT run of ``verl.trainer.sft_trainer`` (``.../global_step_{k}``) and writes
config, weights, generation config and tokenizer to ``<out>``; ``test ... --test_hf_dir <ref>`` compares the merged
weights with a reference folder instead.
"""

from verl.model_merger.base_model_merger import (
    BaseModelMerger,
    ModelMergerConfig,
    generate_config_from_args,
    parse_args,
)

__all__ = ["BaseModelMerger", "ModelMergerConfig", "generate_config_from_args", "main", "parse_args"]


def __getattr__(name: str):
    if name == "main":
        from verl.model_merger.__main__ import main

        return main
    raise AttributeError(f"module 'verl.model_merger' has no attribute {name!r}")
