"""What a run prints and writes: the text report, JSON (version 2), the Prometheus textfile."""
