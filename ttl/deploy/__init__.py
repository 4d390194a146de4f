"""Shipping the product: the JVM jars it needs (``jars``) and the ``spark-submit`` command
that runs a job from a profile (``submit``). The manifests and units live in ``deploy/``."""
