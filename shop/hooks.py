"""What the apps above may hook into when a shopper signs in (log in or
register): shop cannot know them (the cart merges a guest cart here)."""

from django.dispatch import Signal

# Sent with user_id and headers (the request's) after a token was issued. A
# receiver returns a dict of fields to add to the answer (or {}).
signed_in = Signal()


def sign_in_extras(*, user_id: int, headers) -> dict:
    extras: dict = {}
    for _receiver, answer in signed_in.send(sender=None, user_id=user_id, headers=headers):
        extras.update(answer or {})
    return extras
