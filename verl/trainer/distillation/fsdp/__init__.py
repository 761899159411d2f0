"""Distillation losses computed inside the FSDP engine (top-k forward KL in the logits processor)."""
