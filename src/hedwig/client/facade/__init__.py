"""``HedwigClient``, the asynchronous client: its options, lifetime and pushed events
(``client``), and its calls by what they do (``publish``, ``subscribe``, ``admin``)."""

from hedwig.client.facade.client import HedwigClient

__all__ = ["HedwigClient"]
