from django.db import migrations

from shop.migrations import _groups

# Order managers decide and receive returns; stock managers see them (the units they restock).
GRANTS = {
    "Order managers": {"orders.return": ["view", "change"], "orders.returnline": ["view"]},
    "Stock managers": {"orders.return": ["view"], "orders.returnline": ["view"]},
}


class Migration(migrations.Migration):
    dependencies = [("shop", "0013_loyalty_entry_source"), ("orders", "0018_returns_partial_refunds")]

    operations = [migrations.RunPython(_groups.granter(GRANTS), migrations.RunPython.noop)]
