"""Request schemas (JSON Schema draft 4, as Nova's), per resource and microversion."""
