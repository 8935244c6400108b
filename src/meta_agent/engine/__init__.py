"""The engine (root.py) and the runs it wires (runs.py). `from meta_agent.engine import Engine` is the engine."""

# a durable run recorded before RunSpec moved to the core names it here: kept importable, so that it resumes
from meta_agent.core.run_spec import RunSpec
from meta_agent.engine.root import Engine

__all__ = ["Engine", "RunSpec"]
