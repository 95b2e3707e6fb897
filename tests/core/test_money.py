"""core/money.py: integer minor units as money, exactly."""

import pytest

from core.money import format_money, minor_units_help


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (7500, "EUR", "€75.00"),
        (1299, "USD", "$12.99"),
        (5, "GBP", "£0.05"),
        (0, "EUR", "€0.00"),
        (100, "EUR", "€1.00"),
        (1250, "CHF", "CHF 12.50"),
    ],
)
def test_format_money_writes_two_decimals_and_the_symbol(amount, currency, shown):
    assert format_money(amount, currency) == shown


def test_format_money_puts_the_sign_before_the_symbol():
    assert format_money(-250, "EUR") == "-€2.50"
    assert format_money(-5, "EUR") == "-€0.05"  # not "€-1.95", as divmod of the negative amount would give
    assert format_money(-123456789, "USD") == "-$1,234,567.89"
    assert format_money(-1250, "CHF") == "-CHF 12.50"


def test_format_money_groups_thousands():
    assert format_money(123456789, "EUR") == "€1,234,567.89"
    assert format_money(100000, "GBP") == "£1,000.00"


def test_format_money_is_exact_where_a_float_would_round():
    # 2**53 + 1 cents: a float cannot hold it (it would print ...40.92).
    assert format_money(2**53 + 1, "EUR") == "€90,071,992,547,409.93"
    assert format_money(10**18 - 1, "EUR") == "€9,999,999,999,999,999.99"
    assert format_money(1015, "EUR") == "€10.15"  # 10.15 is no exact float


def test_minor_units_help_gives_an_example_in_the_currency():
    assert minor_units_help("EUR") == "minor units (cents): 1299 = €12.99"
    assert minor_units_help("CHF") == "minor units (cents): 1299 = CHF 12.99"
