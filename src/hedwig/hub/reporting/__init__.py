"""What happens on a hub, reported (``events``) and counted (``metrics``), and the load
rates its reports carry (``load``)."""
