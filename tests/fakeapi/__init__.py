"""An in-process fake kube-apiserver for kpe's tests.

It answers on the wire as the captures in tests/data/fixtures/kube-apiserver-wire/
show the real one does (v1.25 line): lists with limit/continue, watch streams
with ADDED/MODIFIED/DELETED/BOOKMARK/ERROR lines, 410 Expired after
compaction, pods/binding with its 409s, JSONPatch with the 422 for a failed
``test`` op, the scheduling-gate rule, Lease optimistic concurrency, Events,
and (optionally) a mutating admission webhook call on pod CREATE.

    from tests.fakeapi import FakeApiServer

    with FakeApiServer(bookmark_interval=0.1) as api:      # or .start() / .stop()
        api.state.add_node({"metadata": {"name": "node-1"}})
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")   # or use api.url
        ...
        api.reset()                                         # empty cluster, same server

``api.state`` (a ``State``) is what tests drive, from any thread:

- objects: ``add_node``, ``add_pod``, ``add(resource, obj, ns)``, ``update(resource, name, ns, merge=/mutate=)``,
  ``delete(resource, name, ns, grace_seconds=None)``, ``get(resource, name, ns)``, ``get_pod``, ``get_node``,
  ``get_lease``, ``objects(resource, ns)``, ``events``, ``leases``, ``bind(ns, name, node)``;
- versions: ``resource_version``, ``compact(rv=None)``;
- watches: ``wait_for_watches(n, resource)``, ``watch_count()``, ``send_bookmarks()``, ``end_watches()``
  (clean end, as timeoutSeconds), ``drop_watches()`` (broken connection);
- faults: ``fail_next(n, status, method=, path=)``, ``cut_next(n, method=, path=)`` (half an answer, then the
  connection breaks), ``clear_faults()``, ``refuse_binding(ns, name, message=None, times=1)``, ``token`` (require a
  bearer token); ``api.stop()`` then ``api.start()`` restarts the server on the same port with the same cluster;
- races: ``before_next(change, method=, path=)`` (another client's write lands just before that request);
- log: ``requests`` / ``requests_to(method, path_prefix)`` (method, path, query, headers, body, ``.json()``);
- admission: ``add_mutating_webhook(name, url, verify=..., failure_policy="Fail")`` (each hook's ``reviews``).

Resources (``resource`` names): "nodes", "pods", "events", "events.events.k8s.io", "leases", "namespaces", "configmaps",
and kpe's own kinds "schedulingpolicies" and "reservations" (cluster-scoped, a status subresource, a generation
that counts spec changes).
"""

from .app import FakeApiApp
from .server import FakeApiServer
from .state import Change, MutatingWebhook, Request, State, Watcher
from .wire import RESOURCES, ApiError, Resource

__all__ = ["FakeApiApp", "FakeApiServer", "State", "Request", "Watcher", "Change", "MutatingWebhook",
           "ApiError", "Resource", "RESOURCES"]
