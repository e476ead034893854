"""kpe's engine: policies compiled once and decided on many times, with no server, HTTP stack or cluster client (docs/architecture.md)."""
