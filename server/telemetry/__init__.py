"""What kpe tells about itself: metrics, JSON logs, the decision log."""
