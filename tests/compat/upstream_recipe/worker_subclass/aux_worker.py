"""The recipe's worker: verl's ``ActorRolloutRefWorker`` with an auxiliary head on the policy and the recipe's actor.

``_build_model_optimizer`` adds the head to the model verl's step built and hands its parameters to the optimizer
(its own learning rate, no weight decay); ``init_model`` swaps in the recipe's actor, as verl recipes do.
"""

from __future__ import annotations

from torch import nn

from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from worker_subclass.aux_actor import AuxCalibrationActor

AUX_LR = 0.05


class CalibrationHead(nn.Module):
    """(mean log-prob, mean entropy) of a response -> logit that it beat its group."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 1)

    def forward(self, features):
        return self.proj(features)


class AuxHeadWorker(ActorRolloutRefWorker):
    def _build_model_optimizer(
        self,
        model_path,
        fsdp_config,
        optim_config,
        override_model_config,
        use_remove_padding=False,
        use_fused_kernels=False,
        enable_gradient_checkpointing=False,
        trust_remote_code=False,
        use_liger=False,
        role="actor",
        enable_activation_offload=False,
        **kwargs,
    ):
        module, optimizer, lr_scheduler, model_config = super()._build_model_optimizer(
            model_path,
            fsdp_config,
            optim_config,
            override_model_config,
            use_remove_padding=use_remove_padding,
            use_fused_kernels=use_fused_kernels,
            enable_gradient_checkpointing=enable_gradient_checkpointing,
            trust_remote_code=trust_remote_code,
            use_liger=use_liger,
            role=role,
            enable_activation_offload=enable_activation_offload,
            **kwargs,
        )
        if role == "actor":
            module.add_module("aux_head", CalibrationHead())
            optimizer.add_param_group({"params": list(module.aux_head.parameters()), "lr": AUX_LR, "weight_decay": 0.0})
        return module, optimizer, lr_scheduler, model_config

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        if self._is_actor:
            actor_config = omega_conf_to_dataclass(self.config.actor)  # as verl's recipes re-read their group
            self.actor = AuxCalibrationActor(
                config=actor_config, actor_module=self.actor_module_fsdp, actor_optimizer=self.actor_optimizer
            )
