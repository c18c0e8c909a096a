"""Which topics this hub owns and how it keeps them: claiming, watching and releasing
(``ownership``), an owned topic (``topic``) and its publishers' duplicate detection
(``dedup``), where new topics go (``choices``), the region's other hubs (``peers``) and their
witness of this hub's session (``witnesses``)."""
