"""A discovery that keeps failing is loud at first, at the tenth try and every sixtieth."""

import logging

from sluicegate.api.retries import repeated_failure_level


def test_loud_at_the_first_the_tenth_and_every_sixtieth_failure() -> None:
    loud = [n for n in range(1, 200) if repeated_failure_level(n) == logging.ERROR]
    assert loud == [1, 10, 60, 120, 180]
    assert repeated_failure_level(2) == logging.WARNING
