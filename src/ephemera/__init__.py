"""ephemera: a small Kubernetes in Python (KEP-6395 dynamic node-local volumes, KEP-6386
pod-level ephemeral storage). See docs/design.md for the map of the packages."""

__version__ = "0.1.0"
