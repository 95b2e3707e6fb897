from django.apps import AppConfig


class CartConfig(AppConfig):
    name = "cart"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from cart.receivers import merge_cart_on_sign_in
        from shop.hooks import signed_in

        signed_in.connect(merge_cart_on_sign_in, dispatch_uid="cart-merge-guest-cart")
