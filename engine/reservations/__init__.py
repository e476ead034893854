"""Reservations at run time: where slots are, what the controller must do, room held in transit."""
