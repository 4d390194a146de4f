"""Shipping the product: the ``spark-submit`` command that runs a job from a profile
(``submit``) and the training run that builds the class-data archive (``archive_build``).
The manifests and units live in ``deploy/``; the jars and the archive itself in ``ttl.jvm``."""
