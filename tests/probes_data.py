"""Reliability probes of item 13 (data the tokenizer or the columns would drop); registered on import by
tests/test_reliability.py.
"""
