"""The cluster as policies see it: nodeInfo, kube-scheduler's own filters, what the cache keeps of a pod, snapshots."""
