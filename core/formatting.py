"""How the shop writes units of a SKU for people: the admin, the commands and
the e-mails all say "2 x MUG-BLUE", with a note after it where there is one."""


def format_units(quantity: int, sku: str, note: str = "") -> str:
    """'2 x MUG-BLUE', or '2 x MUG-BLUE (note)'."""
    return f"{quantity} x {sku}" + (f" ({note})" if note else "")
