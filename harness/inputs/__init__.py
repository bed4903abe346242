"""What a sweep is asked to do: the matrix, the index's releases, the scenarios and test suites."""
