"""The internal tools: tools of meta-agent's own that the model can call, and which of them a configuration offers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from meta_agent.config.settings import Settings
from meta_agent.core.tools import InternalTool
from meta_agent.internal.describe_image import DESCRIBE_IMAGE, describe_image_tool, vision_model_withheld
from meta_agent.internal.image_gen import DEFAULT_IMAGE_MODEL, IMAGE_GEN, image_gen_tool, image_gen_withheld
from meta_agent.internal.images import FETCH_LIMITS
from meta_agent.internal.read_result import READ_RESULT

# Every internal tool, as declared before a configuration enables it.
INTERNAL_TOOLS = (IMAGE_GEN, DESCRIBE_IMAGE, READ_RESULT)
LEFT_OUT = "META_AGENT_INTERNAL_TOOLS leaves it out"  # why an internal tool switched off is withheld


def internal_tools(settings: Settings, environ: Mapping[str, str]) -> tuple[list[InternalTool], dict[str, str]]:
    """The internal tools offered, and why each of the others is withheld (the toolbox lists those too).

    Raises:
        ConfigError: META_AGENT_INTERNAL_TOOLS names an unknown tool.
    """
    enabled = settings.enabled_internal_tools([tool.name for tool in INTERNAL_TOOLS])
    withheld = {tool.name: LEFT_OUT for tool in INTERNAL_TOOLS if tool.name not in enabled}
    if "image_gen" in enabled and (why := image_gen_withheld(settings.image_model, environ)) is not None:
        withheld["image_gen"] = why
    if "describe_image" in enabled and (why := vision_model_withheld(settings.vision_model)) is not None:
        withheld["describe_image"] = why
    offered: list[InternalTool] = []
    limits = dataclasses.replace(FETCH_LIMITS, allowed_networks=settings.fetch_networks())
    if "image_gen" not in withheld:
        offered.append(image_gen_tool(settings.image_model or DEFAULT_IMAGE_MODEL, environ, fetch_limits=limits))
    if "describe_image" not in withheld:
        timeout = settings.model_timeout
        offered.append(describe_image_tool(settings.vision_model, environ, model_timeout=timeout, limits=limits))
    if "read_result" not in withheld:  # always offered: a run keeps a long result only when it can be read
        offered.append(READ_RESULT)
    return offered, withheld
