"""The JVM side of a local install: the resolved jars, the class-data archive, Delta's log
store for local paths. Below the session factory (``ttl.spark``), which uses all three."""
