"""The HTTP transport: the ASGI app, its Host/Origin guard, its connection bounds, and serving it with uvicorn."""
