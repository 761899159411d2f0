"""verl's ``verl.third_party.sglang``: shims for SGLang (``parallel_state`` of verl's former SPMD SGLang rollout)."""
