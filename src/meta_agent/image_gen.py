"""The `image_gen` internal tool: its declaration. The backend that runs it comes with the MCP front."""

from __future__ import annotations

from meta_agent.toolbox import InternalTool, ToolHints

IMAGE_GEN = InternalTool(
    name="image_gen",
    description="Generate images from a text prompt; returns PNG images.",
    input_schema={
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What the image should show."},
            "size": {"type": "string", "description": "WIDTHxHEIGHT, e.g. 1024x1024, or auto."},
            "n": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How many images."},
        },
        "required": ["prompt"],
    },
    # It changes nothing outside meta-agent, so it is read-only (design.md §4: internal read-only tools run
    # without asking); it reaches an outside service, so it is open-world.
    hints=ToolHints(title="Generate images", read_only_hint=True, destructive_hint=False, open_world_hint=True),
)

INTERNAL_TOOLS = (IMAGE_GEN,)
