"""Specs of the operator's resources, parsed from their JSON into frozen dataclasses.

The API server applies the CRDs' defaults before the operator sees an object; the same defaults
are repeated here (and a test checks that they agree with ``crds/``) so that the builders and
reconcilers work on objects that did not pass through a server, as in unit tests.
A spec that cannot be parsed raises ``SpecError`` with the field's path in its message.
"""

from hedwig_operator.specs.autoscaling import AutoscalingSpec
from hedwig_operator.specs.common import SpecError
from hedwig_operator.specs.namespace import NamespaceSpec, parse_namespace
from hedwig_operator.specs.pool import (
    AccessSecret,
    PoolSpec,
    PrometheusSpec,
    RebalancingSpec,
    ScaleDownSpec,
    SecuritySpec,
    StorageSpec,
    parse_pool,
)
from hedwig_operator.specs.topic import DeletionPolicy, ScalingMode, TopicSpec, parse_topic
from hedwig_operator.specs.user import AuthenticationType, UserSpec, parse_user

__all__ = [
    "AccessSecret",
    "AuthenticationType",
    "AutoscalingSpec",
    "DeletionPolicy",
    "NamespaceSpec",
    "PoolSpec",
    "PrometheusSpec",
    "RebalancingSpec",
    "ScaleDownSpec",
    "ScalingMode",
    "SecuritySpec",
    "SpecError",
    "StorageSpec",
    "TopicSpec",
    "UserSpec",
    "parse_namespace",
    "parse_pool",
    "parse_topic",
    "parse_user",
]
