"""Money as staff read it. Amounts are kept in integer minor units (cents)
everywhere; this turns one into text for a page, in whole-number arithmetic:
a float would misround large amounts."""

SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£"}


def format_money(amount: int, currency: str) -> str:
    """7500 EUR -> "€75.00", -250 EUR -> "-€2.50", 1250 CHF -> "CHF 12.50".

    Two decimals always: every currency the shop sells in has two (a currency
    with none or three, such as JPY or KWD, would need its exponent here)."""
    sign = "-" if amount < 0 else ""
    units, cents = divmod(abs(amount), 100)  # of the absolute value: divmod(-250, 100) is (-3, 50)
    symbol = SYMBOLS.get(currency, f"{currency} ")
    return f"{sign}{symbol}{units:,}.{cents:02d}"


def minor_units_help(currency: str) -> str:
    """For the help text of an amount typed as an integer: "minor units (cents): 1299 = €12.99"."""
    return f"minor units (cents): 1299 = {format_money(1299, currency)}"
