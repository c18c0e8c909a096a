"""Running Hedwig on one machine: a standalone ZooKeeper and hub processes.

Used by ``hedwig zk``, ``hedwig dev up``, the demo and the integration tests, so the tests
start exactly what a developer starts by hand.
"""
