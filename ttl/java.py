"""Java classes of the session's JVM, named in full.

Py4J resolves ``jvm.org.apache.hadoop.fs.Path`` one name at a time, asking the JVM whether
``org``, then ``org.apache``, and so on, is a class; each "no" makes the JVM's class loader
look for that class in every jar of the classpath (about 1 ms with ttl's jars, against
0.1 ms for the call itself). A batch made dozens of such walks. A class named in full is a
handle made without a round trip; each call on it is one, as any call is.
"""

from __future__ import annotations

__all__ = ["converters", "java_class", "loaded", "none"]


def java_class(spark, name: str):
    """The class ``name`` (its full binary name: ``a.b.Outer$Inner``, a Scala object's
    ``a.b.Name$``) in the JVM of ``spark`` (a SparkSession or a SparkContext): a Py4J
    ``JavaClass``."""
    # Here, not at the top: executors import modules that import this one, and their
    # Python needs nothing of the driver's (tests/unit/test_submit.py).
    from py4j.java_gateway import JavaClass

    context = getattr(spark, "sparkContext", spark)
    return JavaClass(name, context._jvm._gateway_client)


def loaded(spark, name: str):
    """The class ``name`` when the JVM can load it, else ``None``: for a class of an
    optional jar (ttl's own) or of a newer Delta. One lookup by the full name, where
    ``jvm.a.b.C`` would walk the package names."""
    from py4j.java_gateway import JavaClass

    found = getattr(getattr(spark, "sparkContext", spark)._jvm, name)
    return found if isinstance(found, JavaClass) else None


def none(spark):
    """Scala's ``None``, which many of Delta's methods take."""
    return java_class(spark, "scala.Option").empty()


def converters(spark):
    """Scala's collection converters for Java callers (``asScala``, ``asJava``)."""
    return java_class(spark, "scala.jdk.javaapi.CollectionConverters")
