"""Small tools every stage uses: durations, safe reads of untrusted files, atomic writes, logging,
bounded file-system access, run checkpoints.
"""
