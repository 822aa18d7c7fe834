"""Writing pile stores with dask: the graph, running it, the public shuffles, verify, generations."""
