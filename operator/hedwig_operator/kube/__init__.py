"""The part of the Kubernetes API the operator uses, behind a small Protocol.

kopf watches the operator's own resources and patches them from handlers; everything else
(children by server-side apply, status patches of other objects, Events) goes through
``KubeApi``. Handlers take a ``KubeApi`` argument, so unit tests pass an in-memory fake and the
real implementation (``HttpKubeApi``, aiohttp) is exercised by the end-to-end tests.
"""

from hedwig_operator.kube.api import (
    KubeApi,
    KubeError,
    ObjectRef,
    Objects,
    object_path,
    ref_of,
    selector_of,
)
from hedwig_operator.kube.events import build_event

__all__ = [
    "KubeApi",
    "KubeError",
    "ObjectRef",
    "Objects",
    "build_event",
    "object_path",
    "ref_of",
    "selector_of",
]
