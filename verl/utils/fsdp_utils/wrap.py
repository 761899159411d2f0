"""Sharding a Hugging Face model with FSDP2 the way verl's ``apply_fsdp2`` does, and FSDP1 auto-wrap policies.

verl passes ``fully_shard`` keyword arguments (mesh, mixed precision, offload, reshard policy) and a config holding
``wrap_policy`` and ``forward_prefetch``; the layers to shard on their own are picked by
:func:`layers_to_shard` (the same rule the workers use), plus the input embeddings and
the LM head when they are not tied. :func:`get_fsdp_wrap_policy` builds the FSDP1 ``auto_wrap_policy`` callable verl
code passes around; this package itself never wraps with FSDP1.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.fsdp.wrap import (
    _or_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from torch.distributed.tensor import Shard

from verl.utils.fsdp_utils.common import reject_fsdp1

__all__ = [
    "decoder_layer_classes",
    "layers_to_shard",
    "get_fsdp_wrap_policy",
    "apply_fsdp2",
    "get_shard_placement_fn",
    "set_reshard_after_forward",
]

logger = logging.getLogger(__name__)


def _base_model(model: nn.Module) -> nn.Module:
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_layer_classes(model: nn.Module) -> set[str]:
    """Names of the classes transformers marks as not-to-be-split (the decoder layers)."""
    names = getattr(_base_model(model), "_no_split_modules", None) or []
    return set(names)


def layers_to_shard(
    model: nn.Module, wrap_policy: Mapping[str, Any] | None = None, key: str = "fsdp_config.wrap_policy"
) -> list[nn.Module]:
    """The submodules ``wrap_policy`` shards on their own, in forward (registration) order.

    ``transformer_layer_cls_to_wrap`` (class names; default: the model's ``_no_split_modules``) picks the classes;
    modules of them with fewer than ``min_num_params`` parameters (0: none) stay with their parent. A class name
    the model does not have is a ValueError naming ``key``: a typo would otherwise silently shard the root only.
    """
    policy = dict(wrap_policy or {})
    names = policy.get("transformer_layer_cls_to_wrap")
    names = [names] if isinstance(names, str) else list(names or [])
    if names:
        present = {type(m).__name__ for m in model.modules()}
        unknown = sorted(set(names) - present)
        if unknown:
            raise ValueError(
                f"{key}.transformer_layer_cls_to_wrap: {unknown} not in the model; its module classes "
                f"are {sorted(present)}"
            )
    wanted = set(names) or decoder_layer_classes(model)
    min_params = int(policy.get("min_num_params") or 0)
    return [
        m
        for m in model.modules()
        if m is not model and type(m).__name__ in wanted and sum(p.numel() for p in m.parameters()) >= min_params
    ]


def _as_mapping(config: Any, who: str) -> Mapping[str, Any]:
    """``config`` as read here: a dict, a DictConfig or a typed config (verl's configs are Mappings); None is {}."""
    if config is None:
        return {}
    if isinstance(config, Mapping) or callable(getattr(config, "get", None)):
        return config
    raise TypeError(f"{who}: config must be a mapping or a verl config, got {type(config).__name__}")


def _is_trainable_leaf(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return next(module.children(), None) is None and weight is not None and weight.requires_grad


def get_fsdp_wrap_policy(module: nn.Module, config: Any = None, is_lora: bool = False) -> Callable | None:
    """An FSDP1 ``auto_wrap_policy`` for ``module`` from a ``wrap_policy`` config (mapping or object).

    ``disable`` gives None (no auto wrapping). ``min_num_params`` > 0 wraps by size; otherwise the classes named by
    ``transformer_layer_cls_to_wrap`` (default: the model's ``_no_split_modules``) are wrapped, names the model does
    not have being skipped with a warning (a ValueError when none is found). With ``is_lora`` and no size rule,
    trainable leaf modules (the adapters) are wrapped on their own too.
    """
    config = _as_mapping(config, "get_fsdp_wrap_policy")
    if config.get("disable", False):
        return None
    min_num_params = int(config.get("min_num_params", 0) or 0)
    names = config.get("transformer_layer_cls_to_wrap", None) or getattr(module, "_no_split_modules", None)
    names = [names] if isinstance(names, str) else list(names or [])
    policies: list[Callable] = []
    if is_lora and min_num_params == 0:
        policies.append(functools.partial(lambda_auto_wrap_policy, lambda_fn=_is_trainable_leaf))
    if min_num_params > 0:
        policies.append(functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params))
    elif names:
        classes = {type(m) for m in module.modules() if type(m).__name__ in set(names)}
        missing = sorted(set(names) - {cls.__name__ for cls in classes})
        if not classes:
            raise ValueError(
                f"wrap_policy.transformer_layer_cls_to_wrap: none of {names} is a module class of "
                f"{type(module).__name__}"
            )
        if missing:
            logger.warning(
                "wrap_policy: layer classes %s are not in %s; wrapping %s",
                missing,
                type(module).__name__,
                sorted(cls.__name__ for cls in classes),
            )
        policies.append(functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes))
    return functools.partial(_or_policy, policies=policies) if policies else None


def _embedding_targets(model: nn.Module) -> list[nn.Module]:
    """Input embeddings and the LM head, sharded on their own unless tied (a tied pair must stay in one unit)."""
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        return []
    targets = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, nn.Embedding) or (leaf in ("embed_tokens", "lm_head") and hasattr(module, "weight")):
            targets.append(module)
    return targets


def apply_fsdp2(model: nn.Module, fsdp_kwargs: Mapping[str, Any], config: Any) -> None:
    """``fully_shard`` ``model``'s layers, untied embeddings and LM head one by one, then the root, in place.

    ``fsdp_kwargs`` go to every ``fully_shard`` call (``mesh``, ``mp_policy``, ``offload_policy``,
    ``reshard_after_forward``, ...). ``config`` (an ``fsdp_config``) supplies ``wrap_policy`` (see
    :func:`layers_to_shard`) and ``forward_prefetch`` (each layer starts gathering the
    next one during its own forward).
    """
    reject_fsdp1(model, "apply_fsdp2")
    config = _as_mapping(config, "apply_fsdp2")
    layers = layers_to_shard(model, config.get("wrap_policy", None), key="fsdp_config.wrap_policy")
    if not layers:
        raise ValueError(
            f"apply_fsdp2: fsdp_config.wrap_policy selects no layer of {type(model).__name__}; name "
            "its decoder layer class in transformer_layer_cls_to_wrap"
        )
    chosen = {id(m) for m in layers}
    targets = layers + [m for m in _embedding_targets(model) if id(m) not in chosen and m is not model]
    order = {id(m): i for i, (_, m) in enumerate(model.named_modules())}
    targets.sort(key=lambda m: order[id(m)])
    for module in reversed(targets):  # innermost first: a parent takes the parameters no sharded child claimed
        fully_shard(module, **dict(fsdp_kwargs))
    fully_shard(model, **dict(fsdp_kwargs))
    if config.get("forward_prefetch", False):
        sharded = [m for m in layers if isinstance(m, FSDPModule)]
        for module, following in zip(sharded, sharded[1:]):
            module.set_modules_to_forward_prefetch([following])


def get_shard_placement_fn(fsdp_size: int) -> Callable[[nn.Parameter], Shard]:
    """A ``shard_placement_fn`` for ``fully_shard`` that shards each parameter on its first dim divisible by
    ``fsdp_size`` (no padding), falling back to dim 0."""
    if fsdp_size < 1:
        raise ValueError(f"get_shard_placement_fn: fsdp_size must be >= 1, got {fsdp_size}")

    def placement(param: nn.Parameter) -> Shard:
        for dim, size in enumerate(param.shape):
            if size % fsdp_size == 0:
                return Shard(dim)
        return Shard(0)

    return placement


def set_reshard_after_forward(module: nn.Module, reshard_after_forward: bool, recurse: bool = True) -> None:
    """Change whether FSDP2 frees gathered parameters after forward, on ``module`` (and its FSDP submodules with
    ``recurse``): False keeps them for a following backward or evaluation pass, at the cost of memory."""
    if not isinstance(reshard_after_forward, bool):
        raise TypeError(f"reshard_after_forward must be a bool, got {type(reshard_after_forward).__name__}")
    modules = list(module.modules()) if recurse else [module]
    for sub in modules:
        if isinstance(sub, FSDPModule):
            sub.set_reshard_after_forward(reshard_after_forward, recurse=False)
