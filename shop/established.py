"""Established shoppers: counted per account only, never per client address
(docs/architecture.md, "Hoarding").

The per-address caps (MAX_UNPAID_UNITS_PER_ADDRESS, RATE_LIMIT_VOUCHER_ADDRESS)
stop many throwaway accounts from one address; they also caught every shopper
behind a shared one (a carrier's NAT, an office). An established shopper has
an account older than NEW_ACCOUNT_SECONDS with a verified e-mail (Account:
verified while `verified_email` is still the user's e-mail), or an order that
was paid (orders knows which: it adds that fact, orders/services/holds.py).

Deciding costs no query and no Redis call: the facts come with the user
authentication has just remembered (core/authentication.py keeps them with
the token, in Redis and in process memory, worked out when the token is
issued or read from the database); the account's age is reckoned at the
moment of asking. A shopper whose facts this process does not hold (a service
called without a request, an entry written before facts were kept) counts per
address, as every shopper did before.

When a fact changes (an e-mail verified, a first order paid), the change's
code calls `account_established_changed` after its commit: Redis forgets the
shopper's tokens at once, so a process whose memory of a token has run out
(TOKEN_CACHE_SECONDS at most) reads it from the database again, with the new
facts. Until then the shopper is still counted per address: a late answer
errs on the side the caps were built for.
A changed e-mail (no longer verified) changes the user, which forgets the
tokens and moves the cache generation already (shop/signals.py).
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from knox.models import AuthToken
from redis.exceptions import RedisError

from core.authentication import (
    forget_remembered_user,
    forget_tokens,
    remembered_user_by_id,
    remembered_with_users,
)
from shop.models import Account

logger = logging.getLogger(__name__)

EMAIL_VERIFIED, PAID_ORDER = "email_verified", "paid_order"  # the facts' names (PAID_ORDER: orders')


@remembered_with_users
def verified_emails(users: list) -> dict[int, dict]:
    """For each user, whether their e-mail is verified: one query."""
    verified = dict(
        Account.objects.filter(customer_id__in=[user.pk for user in users])
        .exclude(verified_email="")
        .values_list("customer_id", "verified_email")
    )
    return {user.pk: {EMAIL_VERIFIED: bool(user.email) and verified.get(user.pk) == user.email} for user in users}


def is_established(*, customer_id: int | None, now: datetime | None = None) -> bool:
    """Whether the shopper counts per account only (see above): from what this
    process remembers of them, never a query; False for a guest."""
    user = remembered_user_by_id(customer_id) if customer_id is not None else None
    facts = getattr(user, "remembered_facts", None)
    if not facts:
        return False
    if facts.get(PAID_ORDER):
        return True
    joined = user.date_joined
    old_enough = joined is not None and (now or timezone.now()) - joined >= timedelta(
        seconds=settings.NEW_ACCOUNT_SECONDS
    )
    return old_enough and bool(facts.get(EMAIL_VERIFIED))


def account_established_changed(customer_id: int) -> None:
    """Call after the commit of a change that may establish the shopper (their
    e-mail verified, an order of theirs paid): their tokens leave Redis, so the
    next request reads them from the database with fresh facts (forgetting
    never brings a revoked token back, as rewriting could). Best effort: when
    Redis cannot be told, the shopper stays counted per address until their
    token's entry expires."""
    digests = list(AuthToken.objects.filter(user_id=customer_id).values_list("digest", flat=True))
    forget_remembered_user(customer_id, digests)
    try:
        forget_tokens(digests)
    except RedisError:
        logger.exception("could not forget the tokens of customer %s: per address until they expire", customer_id)
