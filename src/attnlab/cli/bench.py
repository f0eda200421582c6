"""attnlab bench commands (registered on the shared app)."""
