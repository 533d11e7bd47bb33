"""The kubelet's prober (upstream's `pkg/kubelet/prober`): liveness, readiness and startup
probes (exec, httpGet, tcpSocket, grpc) run per container by workers (`worker`), their
results kept per container instance (`results`), what a probe does and the events it posts
(`prober`, `handlers`; network probes inside the pod's network namespace: `netns`,
`grpcprobe`), and the manager the pod workers and the status generation consult (`manager`).

This module imports nothing so that the gRPC helper process starts light.
"""
