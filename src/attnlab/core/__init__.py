"""The maths of attention: every number attnlab shows anywhere is computed here."""
