"""The hub process: wiring and lifecycle (``hub``), periodic work (``loops``), the health and
metrics endpoints (``http``), event-loop stall and collector watching (``stalls``,
``collector``), and the hub's stable id (``identity``)."""
