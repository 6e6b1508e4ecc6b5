"""The host as one snapshot per run: /proc/locks, descriptors, processes, boot id."""
