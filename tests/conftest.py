import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop

# Every process of the project runs on uvloop; so do the tests.
asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
# `controller-svc analyze` keeps the Spark driver's class archive in the user's cache; the tests'
# runs leave it alone (one test records and uses an archive of its own).
os.environ.setdefault("KCONTROLLER_CLASS_ARCHIVE", "off")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for the tests that run the analytics in-process (the JVM starts once)."""
    from controller_svc.analytics import session

    spark = session.build("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="kcontroller-tests")
    yield spark
    spark.stop()
