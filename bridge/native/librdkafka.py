"""Where the librdkafka confluent-kafka loaded lives: the C modules that call librdkafka
(``_kafka``, ``_kafkaread``) bind to that copy, never load a second one."""

from __future__ import annotations

import glob
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)


def wheel_librdkafka_paths() -> list[str]:
    """The librdkafka files of confluent-kafka's wheel (none for a build against a system
    librdkafka), importing confluent-kafka so that its copy is loaded."""
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    return sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*")))


def bind_to_wheel_librdkafka(module: Any, fallback: str) -> bool:
    """Binds the C ``module`` (its ``bind_library``) to the wheel's librdkafka; False where no
    copy serves (``fallback`` says what is used then)."""
    candidates = wheel_librdkafka_paths()
    for path in candidates:
        try:
            module.bind_library(path)
        except OSError as exc:
            logger.debug("librdkafka at %s not usable for %s: %s", path, module.__name__, exc)
            continue
        return True
    logger.info("confluent-kafka's librdkafka not found among %s: %s", candidates, fallback)
    return False
