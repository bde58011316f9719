"""Reliability probes of item 12 (disk, permission, encoding and signal faults); registered on import by
tests/test_reliability.py.
"""
