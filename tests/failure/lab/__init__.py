"""The network lab for the partition scenarios and the nemesis (docs/failure-testing.md).

``netns`` builds namespaces on a bridge, ``partitions`` cuts them apart, ``relay`` slows a link,
``disk`` slows a hub's fsync, ``remote`` runs the history workload in the client's namespace,
and ``cluster`` lays a development cluster out in the lab.
"""
