"""verl.interactions: verl's import paths over the agent loop's interactions."""

from __future__ import annotations

import pytest

from verl.experimental.agent_loop import interaction as agent_loop_interaction
from verl.interactions.base import BaseInteraction
from verl.interactions.utils.interaction_registry import get_interaction_class, initialize_interactions_from_config


def test_paths_are_the_agent_loop_objects():
    assert BaseInteraction is agent_loop_interaction.BaseInteraction
    assert initialize_interactions_from_config is agent_loop_interaction.initialize_interactions_from_config


def test_get_interaction_class_checks_the_class():
    name = "verl.experimental.agent_loop.interaction.ScriptedInteraction"
    assert get_interaction_class(name) is agent_loop_interaction.ScriptedInteraction
    with pytest.raises(ValueError, match="package.module.Class"):
        get_interaction_class("Scripted")
    with pytest.raises(ImportError, match="no_such_module"):
        get_interaction_class("no_such_module.Thing")
    with pytest.raises(TypeError, match="not a BaseInteraction"):
        get_interaction_class("collections.OrderedDict")
