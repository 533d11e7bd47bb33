"""The API server: Kubernetes REST over HTTPS (aiohttp), backed by the Store."""
