"""What a run leaves behind: traces and logs, the runs read back, telemetry, conversations, trust levels."""
