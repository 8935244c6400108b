"""What a run leaves behind to read: traces and logs, the runs read back, telemetry."""
