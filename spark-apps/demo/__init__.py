"""``make demo``: the traffic heat map end to end on this machine (see run_demo.py)."""
