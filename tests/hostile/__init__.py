"""Hostile-input harness of issue 20: mutators that damage a copy of a real capture, and a runner.

``mutators`` copies a corpus capture into a temp folder (never into the repository) and damages the
copy in one way; ``runner`` runs msdiag's CLI on it in a subprocess with a wall-time and a memory
limit, snapshots the inputs before and after, and judges the outcome the issue's "Done when" asks
for. tests/test_hostile.py holds the cases.
"""
