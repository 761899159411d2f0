"""``BaseInteraction``: the class a custom interaction subclasses (verl's import path).

Subclasses implement ``generate_response(instance_id, messages, **kwargs) -> (done, user_text, score, extra)``;
the tool agent loop calls it after every model turn that called no tool.
"""

from verl.experimental.agent_loop.interaction import BaseInteraction

__all__ = ["BaseInteraction"]
