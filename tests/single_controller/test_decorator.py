"""@register, Dispatch/Execute enums and the dispatch-mode registry (no Ray)."""

import asyncio
import inspect
import pickle

import pytest

from verl.single_controller.base import Dispatch, Execute, register, register_dispatch_mode, update_dispatch_mode
from verl.single_controller.base.decorator import (
    DISPATCH_MODE_FN_REGISTRY,
    get_predefined_dispatch_fn,
    get_register_attrs,
)
from verl.single_controller.base.dispatch import collect_all_to_all, dispatch_one_to_all


def test_register_records_modes_and_defaults():
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, execute_mode=Execute.RANK_ZERO, blocking=False)
    def f(self, x):
        return x + 1

    @register()
    def g(self):
        return 1

    assert get_register_attrs(f) == {
        "dispatch_mode": Dispatch.DP_COMPUTE_PROTO,
        "execute_mode": Execute.RANK_ZERO,
        "blocking": False,
    }
    assert get_register_attrs(g)["dispatch_mode"] is Dispatch.ALL_TO_ALL
    assert get_register_attrs(g)["execute_mode"] is Execute.ALL
    assert get_register_attrs(g)["blocking"] is True
    assert f(None, 1) == 2
    assert f.__name__ == "f"


def test_register_keeps_async_methods_async():
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def h(self, x):
        await asyncio.sleep(0)
        return x * 3

    assert inspect.iscoroutinefunction(h)
    assert asyncio.run(h(None, 2)) == 6
    assert get_register_attrs(h)["dispatch_mode"] is Dispatch.ONE_TO_ALL


def test_register_rejects_bad_arguments_with_named_errors():
    with pytest.raises(ValueError, match="dispatch_mode"):
        register(dispatch_mode="DP_COMPUTE")
    with pytest.raises(ValueError, match="execute_mode"):
        register(execute_mode=Dispatch.ONE_TO_ALL)
    with pytest.raises(TypeError, match="blocking"):
        register(blocking="yes")
    with pytest.raises(ValueError, match="collect_fn"):
        register(dispatch_mode={"dispatch_fn": dispatch_one_to_all})
    with pytest.raises(TypeError, match="collect_fn must be callable"):
        register(dispatch_mode={"dispatch_fn": dispatch_one_to_all, "collect_fn": 3})


def test_unregistered_function_has_no_attrs():
    assert get_register_attrs(lambda: 0) is None


def test_every_issue_mode_exists_with_functions():
    names = [
        "ONE_TO_ALL",
        "ALL_TO_ALL",
        "DP_COMPUTE",
        "DP_COMPUTE_PROTO",
        "DP_COMPUTE_PROTO_WITH_FUNC",
        "DP_COMPUTE_METRIC",
        "RANK_ZERO",
        "DIRECT_ROLLOUT_METHOD",
    ]
    for name in names:
        fns = get_predefined_dispatch_fn(getattr(Dispatch, name))
        assert callable(fns["dispatch_fn"]) and callable(fns["collect_fn"])
    assert {m.name for m in Execute} == {"ALL", "RANK_ZERO"}


def test_unknown_member_error_lists_known_members():
    with pytest.raises(AttributeError, match="ONE_TO_ALL"):
        Dispatch.NOT_A_MODE  # noqa: B018


def test_members_survive_pickling_as_the_same_object():
    assert pickle.loads(pickle.dumps(Dispatch.DP_COMPUTE_PROTO)) is Dispatch.DP_COMPUTE_PROTO
    assert pickle.loads(pickle.dumps(Execute.RANK_ZERO)) is Execute.RANK_ZERO


def test_register_dispatch_mode_adds_a_usable_member():
    def dispatch(wg, *args, **kwargs):
        return args, kwargs

    try:
        member = register_dispatch_mode("UNIT_TEST_MODE", dispatch, collect_all_to_all)
        assert Dispatch.UNIT_TEST_MODE is member
        assert get_predefined_dispatch_fn(member)["dispatch_fn"] is dispatch
        with pytest.raises(ValueError, match="UNIT_TEST_MODE is already registered"):
            register_dispatch_mode("UNIT_TEST_MODE", dispatch, collect_all_to_all)

        @register(dispatch_mode=Dispatch.UNIT_TEST_MODE)
        def f(self):
            return 0

        assert get_register_attrs(f)["dispatch_mode"] is member
        update_dispatch_mode(member, dispatch_one_to_all, collect_all_to_all)
        assert get_predefined_dispatch_fn(member)["dispatch_fn"] is dispatch_one_to_all
    finally:
        DISPATCH_MODE_FN_REGISTRY.pop(Dispatch.remove("UNIT_TEST_MODE"), None)
    with pytest.raises(TypeError, match="dispatch_fn must be callable"):
        register_dispatch_mode("BROKEN_MODE", None, collect_all_to_all)
    assert "BROKEN_MODE" not in {m.name for m in Dispatch}
    with pytest.raises(ValueError, match="identifier"):
        register_dispatch_mode("not an identifier", dispatch, collect_all_to_all)


def test_unpickling_an_unknown_member_registers_it():
    """A custom mode defined only on the driver must still unpickle in a worker process."""
    member = Dispatch.register("ONLY_ON_DRIVER")
    data = pickle.dumps(member)
    Dispatch.remove("ONLY_ON_DRIVER")
    try:
        restored = pickle.loads(data)
        assert restored.name == "ONLY_ON_DRIVER" and Dispatch.ONLY_ON_DRIVER is restored
    finally:
        Dispatch.remove("ONLY_ON_DRIVER")
