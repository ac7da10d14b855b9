"""The tuner's rooms: profiling runs and the copies they work on (more to come)."""
