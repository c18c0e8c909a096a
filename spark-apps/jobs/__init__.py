"""Spark applications on Hedwig topics: the traffic heat map (streaming), hub load (batch)."""
