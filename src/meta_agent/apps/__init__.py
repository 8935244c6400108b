"""meta-agent's face: the pages of its views, package data assembled into self-contained documents."""
