"""The small helpers of verl.utils.py_functional."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from omegaconf import OmegaConf

from verl.utils import py_functional as pf


def _slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


def _fails() -> None:
    raise KeyError("missing-key")


def test_timeout_limit_in_a_child_process():
    assert pf.timeout_limit(5)(_slow)(0.0) == "done"
    with pytest.raises(TimeoutError, match="_slow did not finish within 0.2 s"):
        pf.timeout_limit(0.2)(_slow)(3.0)
    with pytest.raises(KeyError, match="missing-key"):  # the child's exception is raised in the caller
        pf.timeout_limit(5)(_fails)()


def test_timeout_limit_with_signals():
    wrapped = pf.timeout_limit(0.2, use_signals=True)(_slow)
    assert wrapped(0.0) == "done"
    with pytest.raises(TimeoutError, match="signal"):
        wrapped(3.0)


def test_dict_helpers():
    merged = pf.union_two_dict({"a": 1}, {"a": 1, "b": 2})
    assert merged == {"a": 1, "b": 2}
    with pytest.raises(AssertionError, match="'a'"):
        pf.union_two_dict({"a": 1}, {"a": 2})
    assert pf.rename_dict({"x": 1, "val/y": 2}, "val/") == {"val/x": 1, "val/y": 2}
    assert pf.list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == {"a": [1, 3], "b": [2, 4]}
    assert pf.list_of_dict_to_dict_of_list([]) == {}
    with pytest.raises(AssertionError, match="dict 1 has key 'c'"):
        pf.list_of_dict_to_dict_of_list([{"a": 1}, {"c": 2}])
    ns = pf.NestedNamespace({"a": {"b": 1}, "c": 2})
    assert ns.a.b == 1 and ns.c == 2


def test_temp_env_var_restores_previous_state(monkeypatch):
    monkeypatch.setenv("VERL_PF_TEST_SET", "before")
    monkeypatch.delenv("VERL_PF_TEST_UNSET", raising=False)
    with pf.temp_env_var("VERL_PF_TEST_SET", "during"), pf.temp_env_var("VERL_PF_TEST_UNSET", "x"):
        assert os.environ["VERL_PF_TEST_SET"] == "during" and os.environ["VERL_PF_TEST_UNSET"] == "x"
    assert os.environ["VERL_PF_TEST_SET"] == "before" and "VERL_PF_TEST_UNSET" not in os.environ


def test_conversions():
    config = OmegaConf.create({"a": [1, {"b": 2}], "c": {"d": 3}})
    assert pf.convert_to_regular_types(config) == {"a": [1, {"b": 2}], "c": {"d": 3}}
    nested = {"x": np.arange(3), "y": [np.array([[1], [2]]), {"z": np.float64(0.5)}]}
    assert pf.convert_nested_value_to_list_recursive(nested) == {"x": [0, 1, 2], "y": [[[1], [2]], {"z": 0.5}]}


def test_dynamic_enum_is_the_single_controller_one():
    from verl.single_controller.base.dynamic_enum import DynamicEnum

    assert pf.DynamicEnum is DynamicEnum
