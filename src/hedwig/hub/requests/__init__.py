"""What each request does on a hub, one path per request (``hedwig.hub.front`` calls it)."""
