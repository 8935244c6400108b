"""Reproducible measurements of meta-agent next to the systems a user would pick instead (`scripts/bench`)."""
