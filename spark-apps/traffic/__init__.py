"""The traffic model of the heat-map use case: the grid, position reports, the simulator."""
