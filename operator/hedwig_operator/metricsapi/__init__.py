"""The Kubernetes external metrics API (``external.metrics.k8s.io/v1beta1``) over Hedwig.

A HorizontalPodAutoscaler with an ``External`` metric asks the API server for
``/apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC?labelSelector=topic=T,subscription=S``;
the API server's aggregation layer sends the request here (an APIService), authenticated with
its front-proxy client certificate and the requester named in ``X-Remote-User``. The answer is
read from the topic's owner through the client library (DESCRIBE_TOPIC for the backlog,
DESCRIBE_QUEUES for the oldest unacknowledged message's age), so no hub is scraped.

It runs as its own process (``python -m hedwig_operator.metricsapi``) from the operator's
image: the autoscaler asks every sync period, the server holds no state, and several replicas
can serve behind one Service, while the operator runs as one replica.
"""
