"""The cart's part in a login: a guest cart sent along (Cart-Token) is merged
into the shopper's (shop/hooks.py sends `signed_in`; shop knows no cart)."""

import logging

from cart.exceptions import CartTokenUnknown, CartUnavailable
from cart.services import merge_guest_cart

logger = logging.getLogger(__name__)


def merge_cart_on_sign_in(*, user_id: int, headers, **kwargs) -> dict:
    token = headers.get("Cart-Token")
    if token is None:
        return {}
    try:
        return {"cart_merged": merge_guest_cart(token=token, customer_id=user_id)}
    except CartTokenUnknown:
        return {"cart_merged": 0}
    except CartUnavailable:  # the login stands; the guest cart stays for a later login
        logger.warning("guest cart not merged at login of user %s: the cart store is unavailable", user_id)
        return {"cart_merged": 0}
