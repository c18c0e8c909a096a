"""A topic served by several hubs: fan-out delivery hubs (``fanout``) fed by a tail of the
owner's log (``tail``), and ingest lanes (``lanes``), both following the topic's plan."""
