"""Linked regions and cross-region delivery: the links, each topic's policy, and what a
replicating owner applies to its local log (``links``, ``applying``)."""
