"""Reliability probes of item 14 and 15 (the Python API as strict as the CLI; attention weights keep their
gradient); registered on import by tests/test_reliability.py.
"""
