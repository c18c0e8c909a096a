"""Delivery to subscribers: a topic's subscriptions (``topic_subscriptions``), one
subscription's flow control and consume mark (``subscription``), and what they send frames to
(``peer``)."""
