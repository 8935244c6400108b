"""The command line: `meta-agent serve|run|tools|check|trust|runs` and what they print."""
