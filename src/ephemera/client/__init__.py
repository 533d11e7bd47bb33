"""The one HTTP client every ephemera component uses to reach the apiserver.

- `load_kubeconfig(path, context=None) -> ClientConfig`: server, CA, client certificate or
  bearer token from a kubeconfig file.
- `ApiClient(config, user_agent=...)`: async get/list/create/update/patch/delete/watch on any
  resource path (`resource_path("pods", "default", "p1", "binding")`); error responses raise
  `ephemera.api.errors.StatusError` as the server's `Status` said them; connection failures
  raise `ApiUnavailable`.
- `Informer(api, path, field_selector=...)`: list then watch, re-list on 410 or a broken
  stream, an in-memory cache with add/update/delete handlers.
- `EventRecorder(api, component)`: core/v1 Events about objects, repeats counted.
- `ephemera.client.leaderelection`: client-go's leader election on a Lease (`LeaderElector`,
  `LeaseLock`), under which the scheduler and the controller-manager do their work.

Nothing else in ephemera speaks HTTP to the apiserver; the rest imports from here.
"""

from ephemera.client.api import (
    ApiClient,
    ApiUnavailable,
    PatchType,
    WatchEvent,
    resource_path,
    status_error_from,
)
from ephemera.client.events import EventRecorder
from ephemera.client.informer import Informer, object_key
from ephemera.client.kubeconfig import (
    ClientConfig,
    KubeconfigError,
    default_kubeconfig_path,
    load_kubeconfig,
)

__all__ = [
    "ApiClient",
    "ApiUnavailable",
    "ClientConfig",
    "EventRecorder",
    "Informer",
    "KubeconfigError",
    "PatchType",
    "WatchEvent",
    "default_kubeconfig_path",
    "load_kubeconfig",
    "object_key",
    "resource_path",
    "status_error_from",
]
