"""Moments given on a command line."""

import argparse
from datetime import datetime

from django.utils import timezone


def iso_moment(text: str) -> datetime:
    """An argparse type: an ISO 8601 date or date-time; one without an offset is
    in the shop's time zone (TIME_ZONE)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or date-time: {text!r}") from None
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)
