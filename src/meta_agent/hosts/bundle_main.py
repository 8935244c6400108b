"""The server of the bundle `meta-agent bundle` builds, as `server/main.py` in it: `meta-agent serve` with the
bundle's servers.json (its arguments, from the manifest), run by the Python the manifest names, which must have
meta-agent installed. It is a file of the bundle, not a module of the package: nothing imports it."""

import sys

if __name__ == "__main__":
    try:
        from meta_agent.cli.main import entry
    except ImportError as exc:
        sys.exit(
            f"meta-agent: {sys.executable} cannot import meta-agent ({exc}): install meta-agent for this Python, or"
            " build the bundle again with `meta-agent bundle --python PATH` naming a Python that has it"
        )
    entry()
