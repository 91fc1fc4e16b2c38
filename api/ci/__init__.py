"""CI logic the API routers share (no routes here)."""
