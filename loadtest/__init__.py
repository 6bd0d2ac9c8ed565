"""Locust load tests that drive the StoreTorrent client library (not HTTP)."""
