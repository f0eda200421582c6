"""The explorer web app: ``create_app()`` builds it, ``attnlab serve`` runs it (§6's figures).

Thin by design: each route parses its bounded input, calls ``attnlab.figures`` / ``labs`` /
``exercises``, and returns the data; ``static/`` draws it with plain JS and plotly.js.
"""

from __future__ import annotations

from attnlab.web.app import create_app

__all__ = ["create_app"]
