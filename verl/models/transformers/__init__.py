"""verl's Hugging Face model helpers (``verl.models.transformers``): the monkey-patch entry point and the
rotary position helpers of the Qwen vision-language families."""
