"""GET /apis/v1/reservations: each reservation's slots as this replica's controller knows them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from server.http.responses import json_response
from server.reservations.controller import ReservationController
from server.state import ServerState


async def reservations_endpoint(request: Request) -> Response:
    """GET /apis/v1/reservations: each reservation's slots, where they are, free or used by which pod."""
    state: ServerState = request.app.state.kpe
    controller = state.reservations
    # The state holds the controller as the verbs see it; this surface owns it and reads more.
    assert controller is None or isinstance(controller, ReservationController)
    policy_set = state.store.current
    leader = state.elector.is_leader if state.elector is not None else False
    if controller is None or state.cache is None or not state.cache.synced.is_set():
        listed = [{"name": r.name, "policy": r.policy, "file": r.file, "mode": r.mode, "returnSlots": r.return_slots, "slots": r.slots} for r in policy_set.reservations]
        return json_response({"leader": leader, "generation": policy_set.generation, "error": "slots are known only with cluster access, once the cache has synced", "reservations": listed}, 503)
    return json_response({"leader": leader, "generation": policy_set.generation, "namespace": controller.namespace, **controller.status()})
