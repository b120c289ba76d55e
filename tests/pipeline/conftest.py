from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for the pipeline tests (the JVM starts once)."""
    from controller_svc.analytics import session

    spark = session.build("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="kcontroller-pipeline-tests")
    yield spark
    spark.stop()
