"""Reliability probes of item 10 (nothing of the user's overwritten); registered on import by
tests/test_reliability.py.
"""
