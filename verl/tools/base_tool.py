"""BaseTool: one callable capability the model may use, with a per-trajectory lifecycle.

Lifecycle, driven by the tool agent loop for every trajectory that uses the tool:

1. ``create(create_kwargs=...)``: per-trajectory state (e.g. the sample's ground truth, from the row's
   ``tools_kwargs[<tool name>]["create_kwargs"]``), before the first call; returns the instance id.
2. ``execute(instance_id, parameters, agent_data=...)``: one call; returns the response the model reads, a step
   reward and metrics. ``agent_data`` is the trajectory's state (messages so far, ``extra_fields``).
3. ``calc_reward(instance_id)``: the tool's verdict on the whole trajectory, once it is finished.
4. ``release(instance_id)``: drop the state; always runs, also after errors.

One tool object serves every trajectory of a process concurrently, so state lives in ``self._instances`` keyed by
instance id, never in attributes. ``execute`` must not block the event loop (use ``asyncio.to_thread`` or a
subprocess): the loop's timeout (``config.timeout_s``) can only interrupt code that awaits.
"""

from __future__ import annotations

import abc
import uuid
from typing import Any, ClassVar

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.import_utils import lazy_exports

__all__ = ["DEFAULT_TOOL_TIMEOUT_S", "BaseTool", "flatten_create_kwargs"]

DEFAULT_TOOL_TIMEOUT_S = 30.0


def flatten_create_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``create(create_kwargs={...}, **other)`` as one mapping: the nested ``create_kwargs`` win over the rest."""
    flat = {key: value for key, value in kwargs.items() if key != "create_kwargs"}
    nested = kwargs.get("create_kwargs")
    if isinstance(nested, dict):
        flat.update(nested)
    return flat


class BaseTool(abc.ABC):
    """Subclasses implement :meth:`execute` and usually set ``default_schema``.

    Args:
        config: the tool's ``config`` mapping from the YAML file; ``timeout_s`` (seconds one call may take, default
            30) is read here, the rest by the subclass.
        tool_schema: the schema the model sees; None uses the class's ``default_schema``.
    """

    default_schema: ClassVar[dict[str, Any] | None] = None

    def __init__(
        self, config: dict[str, Any] | None = None, tool_schema: OpenAIFunctionToolSchema | dict[str, Any] | None = None
    ) -> None:
        self.config = dict(config or {})
        where = f"tool {type(self).__qualname__}"
        if tool_schema is None:
            tool_schema = self._class_schema(where)
        if isinstance(tool_schema, dict):
            tool_schema = OpenAIFunctionToolSchema.from_dict(tool_schema, where=f"{where} tool_schema")
        if not isinstance(tool_schema, OpenAIFunctionToolSchema):
            raise TypeError(
                f"{where}: tool_schema must be a dict or OpenAIFunctionToolSchema, got {type(tool_schema).__name__}"
            )
        self.tool_schema = tool_schema
        self.name = tool_schema.name
        timeout = self.config.get("timeout_s", DEFAULT_TOOL_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"{where} config.timeout_s: must be a positive number of seconds, got {timeout!r}")
        self.timeout_s = float(timeout)
        self._instances: dict[str, dict[str, Any]] = {}

    def _class_schema(self, where: str) -> OpenAIFunctionToolSchema | dict[str, Any]:
        """The schema a tool built without ``tool_schema`` uses: ``get_openai_tool_schema()`` where a subclass
        overrides it (verl's way), else the class's ``default_schema``."""
        if type(self).get_openai_tool_schema is not BaseTool.get_openai_tool_schema:
            schema = self.get_openai_tool_schema()
            if schema is not None:
                return schema
        if self.default_schema is None:
            raise ValueError(
                f"{where}: no tool_schema given, and the class has neither a default_schema nor its own "
                "get_openai_tool_schema()"
            )
        return self.default_schema

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start per-trajectory state; returns the instance id (a fresh one when None) and an optional greeting.

        The agent loop passes the row's ``tools_kwargs[<name>]["create_kwargs"]`` as ``create_kwargs=`` (verl's
        calling convention); they are stored flat, together with any other keyword, under ``"create_kwargs"``.
        """
        instance_id = instance_id or uuid.uuid4().hex
        self._instances[instance_id] = {"create_kwargs": flatten_create_kwargs(kwargs)}
        return instance_id, ToolResponse()

    @abc.abstractmethod
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run one call; returns (response for the model, step reward, metrics)."""

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The tool's score for the finished trajectory (0.0 unless a subclass knows better)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)

    def instance_state(self, instance_id: str) -> dict[str, Any]:
        """The state dict of ``instance_id``; a KeyError names the tool and the id when it was never created."""
        try:
            return self._instances[instance_id]
        except KeyError:
            raise KeyError(f"tool {self.name!r}: no instance {instance_id!r} (create() first)") from None


# verl 0.4 defined the tool-config loader here; it lives in verl.tools.registry (which imports this module)
__getattr__ = lazy_exports(__name__, {"initialize_tools_from_config": "verl.tools.registry"})
