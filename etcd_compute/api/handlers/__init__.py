"""HTTP handlers, one module per resource (thin: parse, authorize, call objects, render)."""
