"""The MCP edge towards the child servers: their processes, connections and supervision."""
