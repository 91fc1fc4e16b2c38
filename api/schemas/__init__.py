"""Request and response schemas of the public API, one module per resource."""
