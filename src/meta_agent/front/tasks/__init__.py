"""MCP tasks: the board that keeps them and their shapes on the wire in both protocol eras."""
