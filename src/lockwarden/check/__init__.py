"""From a claim and the snapshot to a finding: identify the holder, classify, advise; the sighting
memory of kernel locks.
"""
