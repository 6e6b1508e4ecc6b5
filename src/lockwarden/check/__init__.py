"""From a claim and the snapshot to a finding: one interface for every lock source (source.py),
identify the holder, classify, advise; the sighting memory of kernel locks.
"""
