"""attnlab labs commands (registered on the shared app)."""
