"""The OpenAPI schema describes what the API really sends: a generated client
built from it must send the right bodies and understand every answer."""

import pytest
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator

from core.errors import ErrorCode

# operation -> (request component or None, {status: response component or None})
EXPECTED = {
    ("/api/auth/register", "post"): ("RegisterRequest", {"201": "Token"}),
    ("/api/auth/token", "post"): ("LoginRequest", {"200": "Token"}),
    ("/api/auth/logout", "post"): (None, {"204": None}),
    ("/api/auth/me", "get"): (None, {"200": "Me"}),
    ("/api/auth/me", "delete"): ("AccountErasureRequest", {"204": None}),
    ("/api/auth/me/export", "get"): (None, {"200": "PersonalData"}),
    ("/api/auth/me/address", "get"): (None, {"200": "ShippingAddress"}),
    ("/api/auth/me/address", "put"): ("ShippingAddressRequest", {"200": "ShippingAddress"}),
    ("/api/auth/password", "post"): ("PasswordChangeRequest", {"204": None}),
    ("/api/auth/password-reset", "post"): ("PasswordResetRequest", {"202": "PasswordResetAsked"}),
    ("/api/auth/password-reset/confirm", "post"): ("PasswordResetConfirmRequest", {"204": None}),
    ("/api/auth/verify-email", "post"): ("EmailVerificationRequest", {"204": None}),
    ("/api/auth/verify-email/resend", "post"): (None, {"202": "VerificationSent"}),
    ("/api/auth/me/email", "put"): ("EmailChangeRequest", {"202": "EmailChangeAsked"}),
    ("/api/products", "get"): (None, {"200": "ProductPage"}),
    ("/api/products/{sku}", "get"): (None, {"200": "Product"}),
    ("/api/cart", "get"): (None, {"200": "Cart"}),
    ("/api/cart/items/{sku}", "put"): ("CartItemQuantityRequest", {"200": "Cart"}),
    ("/api/cart/items/{sku}", "delete"): (None, {"204": None}),
    ("/api/cart/voucher", "put"): ("CartVoucherCodeRequest", {"200": "Cart"}),
    ("/api/orders/{order_id}/payment", "post"): (None, {"201": "PaymentSession", "200": "PaymentSession"}),
    ("/api/cart/voucher", "delete"): (None, {"204": None}),
    ("/api/cart/shipping-method", "put"): ("CartShippingMethodRequest", {"200": "Cart"}),
    ("/api/cart/shipping-method", "delete"): (None, {"204": None}),
    ("/api/shipping-methods", "get"): (None, {"200": "ShippingMethod"}),
    ("/api/orders", "get"): (None, {"200": "OrderPage"}),
    ("/api/orders", "post"): ("CheckoutRequest", {"200": "Order", "201": "Order", "202": "Order"}),
    ("/api/orders/{order_id}", "get"): (None, {"200": "Order"}),
    ("/api/orders/{order_id}/cancel", "post"): (None, {"200": "Order"}),
    ("/api/orders/{order_id}/returns", "get"): (None, {"200": "Return"}),
    ("/api/orders/{order_id}/returns", "post"): ("NewReturnRequest", {"201": "Return"}),
    ("/api/payments/webhook", "post"): ("ProviderNotificationRequest", {"200": "ProviderReceipt"}),
    ("/api/payments/stripe/webhook", "post"): ("StripeEventRequest", {"200": "StripeReceipt"}),
}
# Statuses each operation really answers besides its successes (every one tested elsewhere).
ERRORS = {
    ("/api/auth/register", "post"): {400, 409, 413, 415, 429, 503},
    ("/api/auth/token", "post"): {400, 401, 413, 415, 429, 503},
    ("/api/auth/logout", "post"): {401, 503},
    ("/api/auth/me", "get"): {401, 503},
    ("/api/auth/me", "delete"): {400, 401, 409, 413, 415, 429, 503},
    ("/api/auth/me/export", "get"): {401, 503},
    ("/api/auth/me/address", "get"): {401, 404, 503},
    ("/api/auth/me/address", "put"): {400, 401, 413, 415, 503},
    ("/api/auth/password", "post"): {400, 401, 413, 415, 429, 503},
    ("/api/auth/password-reset", "post"): {400, 413, 415, 429, 503},
    ("/api/auth/password-reset/confirm", "post"): {400, 413, 415, 429, 503},
    ("/api/auth/verify-email", "post"): {400, 413, 415, 429, 503},
    ("/api/auth/verify-email/resend", "post"): {401, 409, 429, 503},
    ("/api/auth/me/email", "put"): {400, 401, 413, 415, 429, 503},
    ("/api/products", "get"): {400, 404, 503},
    ("/api/products/{sku}", "get"): {404, 503},
    ("/api/cart", "get"): {401, 404, 503},
    ("/api/cart/items/{sku}", "put"): {400, 401, 404, 409, 413, 415, 422, 429, 503},
    ("/api/cart/items/{sku}", "delete"): {401, 404, 429, 503},
    ("/api/cart/voucher", "put"): {400, 401, 404, 413, 415, 422, 429, 503},
    ("/api/orders/{order_id}/payment", "post"): {401, 404, 409, 503},
    ("/api/cart/voucher", "delete"): {401, 404, 503},
    ("/api/cart/shipping-method", "put"): {400, 401, 404, 413, 415, 422, 503},
    ("/api/cart/shipping-method", "delete"): {401, 404, 503},
    ("/api/shipping-methods", "get"): {400, 401, 404, 503},
    ("/api/orders", "get"): {400, 401, 404, 503},
    ("/api/orders", "post"): {400, 401, 403, 409, 413, 415, 422, 429, 503},
    ("/api/orders/{order_id}", "get"): {401, 404, 503},
    ("/api/orders/{order_id}/cancel", "post"): {401, 404, 409, 503},
    ("/api/orders/{order_id}/returns", "get"): {401, 404, 503},
    ("/api/orders/{order_id}/returns", "post"): {400, 401, 404, 409, 413, 415, 422, 503},
    ("/api/payments/webhook", "post"): {400, 401, 413, 415, 503},
    ("/api/payments/stripe/webhook", "post"): {400, 401, 413, 503},
}


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def ref(content: dict | None) -> str | None:
    if not content:
        return None
    target = content["application/json"]["schema"]
    target = target.get("items", target)
    return target["$ref"].rsplit("/", 1)[-1]


def test_schema_generates_without_a_warning(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def test_every_body_and_response_has_its_own_correct_component(schema):
    operations = {
        (path, method): operation
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
        if method in {"get", "post", "put", "delete", "patch"}
    }
    assert set(operations) == set(EXPECTED)
    for key, (request, responses) in EXPECTED.items():
        operation = operations[key]
        assert ref(operation.get("requestBody", {}).get("content")) == request, key
        successes = {status: ref(r.get("content")) for status, r in operation["responses"].items() if status < "300"}
        assert successes == responses, key
        errors = {int(status) for status in operation["responses"] if status >= "400"}
        assert errors == ERRORS[key], key
        assert {ref(operation["responses"][str(status)]["content"]) for status in errors} == {"Error"}, key
    requests = [request for request, _ in EXPECTED.values() if request]
    assert len(requests) == len(set(requests))  # no two bodies share a component


def test_the_bodies_a_client_must_send_are_described_right(schema):
    components = schema["components"]["schemas"]
    assert components["CartItemQuantityRequest"]["required"] == ["quantity"]
    assert components["CartItemQuantityRequest"]["properties"]["quantity"]["maximum"] == 99
    assert set(components["PaymentNotificationRequest"]["required"]) == {
        "payment_id",
        "order_id",
        "amount",
        "currency",
        "status",
    }
    assert set(components["RegisterRequest"]["properties"]) == {"username", "password", "email"}
    assert set(components["LoginRequest"]["properties"]) == {"username", "password"}
    assert set(components["PaymentReceipt"]["properties"]) == {"payment_id", "outcome", "redelivered"}
    assert set(components["RefundNotificationRequest"]["required"]) == {
        "type",
        "refund_id",
        "payment_id",
        "amount",
        "currency",
        "status",
    }
    assert set(components["RefundReceipt"]["properties"]) == {"refund_id", "outcome"}
    one_of = components["ProviderNotificationRequest"]["oneOf"]
    kinds = {ref["$ref"].rsplit("/", 1)[-1] for ref in one_of}
    assert kinds == {"PaymentNotificationRequest", "RefundNotificationRequest"}
    assert set(components["Token"]["properties"]) == {"token", "expiry", "cart_merged"}
    required = set(components["ShippingAddressRequest"]["required"])
    assert required == {"name", "line1", "city", "postal_code", "country", "phone"}
    assert set(components["Product"]["properties"]) == {
        "sku",
        "name",
        "description",
        "image_url",
        "price",
        "currency",
        "available",
        "in_stock",
        "flash_sale",
    }
    page = components["OrderPage"]["properties"]
    assert set(page) == {"count", "next", "previous", "results"}
    assert page["results"]["items"]["$ref"].endswith("/Order")


def test_parameters_say_what_the_server_accepts(schema):
    checkout = schema["paths"]["/api/orders"]["post"]
    [key] = [p for p in checkout["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["required"] and key["schema"] == {
        "type": "string",
        "pattern": r"^[\x21-\x7e]{1,64}$",
        "minLength": 1,
        "maxLength": 64,
    }
    page, status = sorted(schema["paths"]["/api/orders"]["get"]["parameters"], key=lambda p: p["name"])
    assert page["name"] == "page" and page["schema"]["type"] == "integer"
    assert status["name"] == "status" and "PAID" in status["schema"]["enum"]
    named = {p["name"]: p for p in schema["paths"]["/api/cart/items/{sku}"]["put"]["parameters"]}
    sku, cart_token = named["sku"], named["Cart-Token"]
    assert sku["schema"]["pattern"] == r"^[A-Za-z0-9._-]{1,64}$"
    assert cart_token["name"] == "Cart-Token" and cart_token["in"] == "header"
    assert "Cart-Token" in schema["paths"]["/api/cart/items/{sku}"]["put"]["responses"]["200"]["headers"]
    browse = {p["name"] for p in schema["paths"]["/api/products"]["get"]["parameters"]}
    assert browse == {"q", "in_stock", "sort", "page", "page_size"}
    webhook = schema["paths"]["/api/payments/webhook"]["post"]
    assert [p["name"] for p in webhook["parameters"]] == ["Payment-Signature"]


def test_operation_ids_are_stable(schema):
    # Generated clients name their methods after these (/api/orders keeps its
    # two although a handler per action serves it).
    ids = {
        (path, method): operation["operationId"]
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    }
    assert ids == {
        ("/api/auth/logout", "post"): "auth_logout_create",
        ("/api/auth/me", "get"): "auth_me_retrieve",
        ("/api/auth/me", "delete"): "auth_me_destroy",
        ("/api/auth/me/export", "get"): "auth_me_export_retrieve",
        ("/api/auth/me/address", "get"): "auth_me_address_retrieve",
        ("/api/auth/me/address", "put"): "auth_me_address_update",
        ("/api/auth/password", "post"): "auth_password_create",
        ("/api/products", "get"): "products_list",
        ("/api/products/{sku}", "get"): "products_retrieve",
        ("/api/auth/register", "post"): "auth_register_create",
        ("/api/auth/token", "post"): "auth_token_create",
        ("/api/cart", "get"): "cart_retrieve",
        ("/api/cart/items/{sku}", "put"): "cart_items_update",
        ("/api/cart/items/{sku}", "delete"): "cart_items_destroy",
        ("/api/cart/voucher", "put"): "cart_voucher_update",
        ("/api/orders/{order_id}/payment", "post"): "orders_payment_create",
        ("/api/cart/voucher", "delete"): "cart_voucher_destroy",
        ("/api/cart/shipping-method", "put"): "cart_shipping_method_update",
        ("/api/cart/shipping-method", "delete"): "cart_shipping_method_destroy",
        ("/api/shipping-methods", "get"): "shipping_methods_list",
        ("/api/orders", "get"): "orders_list",
        ("/api/orders", "post"): "orders_create",
        ("/api/orders/{order_id}", "get"): "orders_retrieve",
        ("/api/orders/{order_id}/cancel", "post"): "orders_cancel_create",
        ("/api/orders/{order_id}/returns", "get"): "orders_returns_list",
        ("/api/orders/{order_id}/returns", "post"): "orders_returns_create",
        ("/api/payments/webhook", "post"): "payments_webhook_create",
        ("/api/payments/stripe/webhook", "post"): "payments_stripe_webhook_create",
        ("/api/auth/password-reset", "post"): "auth_password_reset_create",
        ("/api/auth/password-reset/confirm", "post"): "auth_password_reset_confirm_create",
        ("/api/auth/verify-email", "post"): "auth_verify_email_create",
        ("/api/auth/verify-email/resend", "post"): "auth_verify_email_resend_create",
        ("/api/auth/me/email", "put"): "auth_me_email_update",
    }


def test_the_error_code_is_an_enum_of_exactly_the_registry(schema):
    components = schema["components"]["schemas"]
    body = components[components["Error"]["properties"]["error"]["$ref"].rsplit("/", 1)[-1]]
    field = body["properties"]["code"]
    enum = components[field["$ref"].rsplit("/", 1)[-1]] if "$ref" in field else field
    assert enum["type"] == "string"
    assert enum["enum"] == [member.value for member in ErrorCode]
    assert set(body["required"]) == {"code", "message", "details"}
