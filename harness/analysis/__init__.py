"""Pure logic: statuses, versions, signatures, attribution, refinement and bisection searches, pins, reports. No I/O."""
