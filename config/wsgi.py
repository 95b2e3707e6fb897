import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from orders.queue_producer import warm_queue_producer_in_background  # noqa: E402 - needs Django set up

warm_queue_producer_in_background()  # a queue-mode sale's first checkouts need not wait for the broker
