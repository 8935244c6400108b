"""The stdio transport: serving on stdin/stdout, and screening each line the host writes."""
