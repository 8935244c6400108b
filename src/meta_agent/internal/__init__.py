"""The internal tools: tools of meta-agent's own that the model can call (design.md §2.7)."""
