"""Local tooling, not the product: what a laptop or a test run needs around a store.

* ``kafka``: a real Apache Kafka broker or three-node KRaft cluster on 127.0.0.1;
* ``spark_cluster``: a real Spark standalone cluster (master + workers) on 127.0.0.1;
* ``sample``: a sample-input producer for the embedded default;
* ``process``: child processes that die with their parent, free ports, foreground services.

The product imports this package only where a profile says ``kafka.bootstrap_servers =
"embedded"`` (``ttl.app``); a cluster deployment never loads it.
"""
