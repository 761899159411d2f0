"""verl's ``verl.models.mcore.loader``: load a Hugging Face state dict into Megatron GPT models (not in this
build; the function raises ``MissingExtraError`` when called)."""

from verl.models.mcore._missing import megatron_function

__all__ = ["load_state_dict_to_megatron_gptmodel"]

load_state_dict_to_megatron_gptmodel = megatron_function("load_state_dict_to_megatron_gptmodel", __name__)
