"""Endpoints for people and probes: health, readiness, metrics, policies, decisions, explain."""
