"""Hedwig's ZooKeeper client: ZooKeeper's protocol on the event loop, batching built in.

The modules here are its parts, from the pure codec (``codes``, ``jute``, ``records``,
``multi``, ``framing``) up.
"""
