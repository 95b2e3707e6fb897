"""How the shop writes units of a SKU for people: the admin, the commands and
the e-mails all say "2 x MUG-BLUE", with a note after it where there is one."""


def format_units(quantity: int, sku: str, note: str = "") -> str:
    """'2 x MUG-BLUE', or '2 x MUG-BLUE (note)'."""
    return f"{quantity} x {sku}" + (f" ({note})" if note else "")


def format_line(line: dict, note: str = "") -> str:
    """A refund's or an event's line: its units ('2 x A (note)'), or the order's
    shipping paid back ('shipping standard (note)')."""
    if "shipping" in line:
        return f"shipping {line['shipping']}" + (f" ({note})" if note else "")
    return format_units(line["quantity"], line["sku"], note)
