"""A recipe that subclasses verl's worker and actor: an auxiliary calibration head added to the policy in
``_build_model_optimizer`` and trained by the actor's ``_forward_micro_batch`` / ``_optimizer_step`` overrides."""
