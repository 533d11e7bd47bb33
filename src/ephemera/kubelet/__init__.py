"""The kubelet: one per node. Registers its Node, admits the pods bound to it (allocation),
mounts their volumes (volumes/), runs their containers through the runtime seam (runtime/),
writes their status back, serves its HTTP API, and (later) accounts storage and evicts.
Words follow upstream's pkg/kubelet so a Kubernetes engineer finds each concept where they
expect it."""
