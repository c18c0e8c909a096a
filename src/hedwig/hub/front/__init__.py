"""The hub's door: connections and the one error boundary (``server``), TLS (``tls``),
authentication and authorization (``access``), and the ACL rules it obeys (``acl_watch``)."""
