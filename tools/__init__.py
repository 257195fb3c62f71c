"""Developer tools: local services for the demo, `make up` and the tests; the demo itself."""
