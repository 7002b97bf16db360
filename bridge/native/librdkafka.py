"""Where the librdkafka confluent-kafka loaded lives: the C modules that call librdkafka
(``_kafka``, ``_kafkaread``) bind to that copy, never load a second one."""

from __future__ import annotations

import glob
import os


def wheel_librdkafka_paths() -> list[str]:
    """The librdkafka files of confluent-kafka's wheel (none for a build against a system
    librdkafka), importing confluent-kafka so that its copy is loaded."""
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    return sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*")))
