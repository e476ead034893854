"""The one package that talks to the Kubernetes API: the client, watches, the node and pod cache, leader election."""
