"""Policies the end-to-end scenarios share."""

# At most one pod of a team per node: a filter that reads nodeInfo, so evictions can
# change its verdict, and whose answer shows which pods kpe's cache holds for a node.
ONE_PER_TEAM = """apiVersion: kpe.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: one-per-team}
spec:
  match: {podSelector: {matchExpressions: [{key: team, operator: Exists}]}}
  filters:
  - name: spread
    expression: "!nodeInfo.pods.exists(p, p.metadata.?labels[?'team'].orValue('') == pod.metadata.labels['team'])"
    message: a pod of this team already runs here
"""
