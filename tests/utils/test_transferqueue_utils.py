"""transferqueue_utils without TransferQueue: tqbridge passes calls through, queue names raise, repeat_dict works."""

import asyncio

import numpy as np
import pytest
import torch

from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.extras import MissingExtraError
from verl.utils.transferqueue_utils import (
    BatchMeta,
    create_transferqueue_client,
    get_transferqueue_client,
    repeat_dict,
    tq,
    tqbridge,
)


def test_tqbridge_is_a_pass_through_for_sync_and_async_functions():
    @tqbridge()
    def double(x, *, scale=2):
        """doc kept"""
        return x * scale

    @tqbridge(put_data=False)
    async def add(x, y):
        return x + y

    assert double(3) == 6 and double(3, scale=3) == 9 and double.__doc__ == "doc kept"
    assert asyncio.iscoroutinefunction(add) and asyncio.run(add(1, 2)) == 3
    with pytest.raises(ValueError, match="must be a Dispatch member"):
        tqbridge(dispatch_mode="not-a-mode")


def test_transfer_queue_names_raise_clearly():
    for call in (
        lambda: tq.init(),
        lambda: tq.get_client(),
        lambda: create_transferqueue_client("c", None),
        lambda: BatchMeta(),
        lambda: PPOTrainerSync({}),
    ):
        with pytest.raises(MissingExtraError, match="TransferQueue.*not part of this build"):
            call()
    assert get_transferqueue_client() is None


def test_repeat_dict_interleaves_or_tiles_every_column():
    batch = {"ids": torch.tensor([[1, 1], [2, 2]]), "uid": np.array(["a", "b"], dtype=object), "raw": ["p", "q"]}
    out = repeat_dict(batch, repeat_times=2)
    assert out["ids"].tolist() == [[1, 1], [1, 1], [2, 2], [2, 2]]
    assert out["uid"].tolist() == ["a", "a", "b", "b"] and out["raw"] == ["p", "p", "q", "q"]
    tiled = repeat_dict(batch, repeat_times=2, interleave=False)
    assert tiled["ids"][:, 0].tolist() == [1, 2, 1, 2] and tiled["raw"] == ["p", "q", "p", "q"]
    assert repeat_dict(batch, 1) is batch
    with pytest.raises(TypeError, match="column 'n'"):
        repeat_dict({"n": 3})
