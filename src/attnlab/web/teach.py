"""Routes for the chapter's reasoning: every equation explained, symbol by symbol (issue 11)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api", tags=["the why"])
