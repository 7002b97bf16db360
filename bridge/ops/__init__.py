"""Operating pgbridge, around the streaming core: `pgbridge check` and `status`, the apply job's
status, the demo, Prometheus metrics and the hot path's hooks, logging."""
