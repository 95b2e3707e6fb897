"""Filters the LOGGING setting puts on Django's own loggers."""

import logging


class ClientMistakeFilter(logging.Filter):
    """A request Django refuses with a 400 for its Host header (django.security.DisallowedHost)
    is the client's mistake, or a scanner's: one WARNING line, without the traceback
    Django logs it with at ERROR (an error alert for every probe)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True
