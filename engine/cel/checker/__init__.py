"""What is known of an expression before it runs: its worst-case cost."""
