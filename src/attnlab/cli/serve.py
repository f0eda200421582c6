"""attnlab serve commands (registered on the shared app)."""
