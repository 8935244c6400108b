"""Small helpers every layer uses: the standard library and pydantic only, and no I/O of their own."""
