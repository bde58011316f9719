"""Reliability probes of item 11 (nothing leaked); registered on import by tests/test_reliability.py."""
