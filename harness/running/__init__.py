"""Running cells: environments, the zygote and fork servers, scenario and test processes, the sweep's jobs."""
