"""Our code beside the reference code it reimplements, on the same inputs."""
