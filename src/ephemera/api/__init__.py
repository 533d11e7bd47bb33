"""Kubernetes object helpers with no I/O: Status errors, field paths and errors, the served
schema (derived from the upstream OpenAPI), patches, selectors, quantities."""
