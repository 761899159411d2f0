"""The packed wire format of hybrid batch calls: results and errors survive, unpicklable errors are named."""

from __future__ import annotations

import pickle

from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.batch_wire import pack_batch, unpack_batch


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("cannot pickle this error")


def test_outputs_and_errors_round_trip_in_one_bytes():
    items = [TokenOutput(token_ids=[1, 2], log_probs=[-0.1, -0.2], stop_reason="length"), ValueError("bad prompt")]
    packed = pack_batch(items)
    assert isinstance(packed, bytes)
    out = unpack_batch(packed)
    assert out[0] == items[0]
    assert isinstance(out[1], ValueError) and str(out[1]) == "bad prompt"


def test_an_error_that_does_not_pickle_travels_as_a_named_runtime_error():
    out = unpack_batch(pack_batch([TokenOutput(token_ids=[3]), _Unpicklable("engine state")]))
    assert out[0].token_ids == [3]
    assert isinstance(out[1], RuntimeError) and "_Unpicklable: engine state" in str(out[1])
    assert unpack_batch([1, 2]) == [1, 2]  # plain lists pass through
    assert pickle.loads(pack_batch([])) == []
