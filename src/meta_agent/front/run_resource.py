"""The resource template meta-agent://runs/{run_id}: how a run is, from the run index any replica reads; once it is
done, its structured result, then each image of its result as a blob of its media type, in the order the run's tool
result gave them, whichever replica ran it.

A resource function of the SDK gives one content, so this template is not one: the server lists it and reads it
itself (MetaAgentServer.list_resource_templates and read_resource), with these functions.
"""

from __future__ import annotations

import json

import mcp.types as t
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.uri_template import UriTemplate

from meta_agent.core.result_images import image_bytes
from meta_agent.engine.runs import Runs

RUNS_URI = "meta-agent://runs/{run_id}"
JSON = "application/json"
TEMPLATE = t.ResourceTemplate(
    uri_template=RUNS_URI,
    name="run",
    mime_type=JSON,
    description="A run's status (running, interrupted: its replica stopped mid-run, done) and, when done, its"
    " structured result (or why it has none), then the images of its result, each a blob of its media type. Only the"
    " caller's own runs: another's is unknown.",
)
_PARSED = UriTemplate.parse(RUNS_URI)


def run_id_in(uri: str) -> str | None:
    """The run id a URI of this template names; None: the URI is not one."""
    matched = _PARSED.match(uri)
    return None if matched is None else str(matched["run_id"])


async def run_contents(runs: Runs, run_id: str, owner: str) -> list[ReadResourceContents]:
    """`owner`'s run `run_id` as the resource gives it: its state as JSON, then its result's images (decoded a slice
    at a time, a long one in a worker thread: the event loop goes on meanwhile).

    Raises:
        ResourceError: `owner` has no such run (never had, or it is another's: the same error); an image of its
            result is not base64 in the database.
    """
    state = await runs.read(run_id, owner, images=True)
    if state is None:
        raise ResourceNotFoundError(f"unknown run {run_id!r}")  # -32602, as any resource that does not exist
    contents = [ReadResourceContents(content=json.dumps(state.to_json(), indent=2), mime_type=JSON)]
    for number, image in enumerate(state.images, 1):
        # the SDK sends bytes as base64 again: the same text, as a result carries only base64 as encoders write it
        if (data := await image_bytes(image.data)) is None:  # a row written by hand
            raise ResourceError(f"run {run_id!r}: image {number} of its result is not base64 in the database")
        contents.append(ReadResourceContents(content=data, mime_type=image.mime_type))
    return contents
