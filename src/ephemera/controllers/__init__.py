"""Controllers: the loops outside the apiserver and the kubelet that keep objects current, each
talking to the apiserver only through `ephemera.client`, as upstream's kube-controller-manager
does. They run in the `ephemera controller-manager` process (`ephemera.cli.controllers`).

- `resourcequota.ResourceQuotaController`: keeps every ResourceQuota's `status.hard` (from
  `spec.hard`) and `status.used` (recomputed from the namespace's objects) current, on pod
  and quota changes and periodically, so that deleted and finished pods release their usage.
"""
