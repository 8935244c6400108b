"""The tools a run can use: the registry built from the internal tools, the children and the webhooks (build.py)."""
