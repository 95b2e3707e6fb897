from django.db import migrations

from shop.migrations import _groups

# A return is part of its order: the admin lets through whoever may view (or change) orders, and
# 0014's grants of the Return models were never read (stock managers do not see returns). Taken back,
# so that a group's permissions say what it can do.
GRANTS = {
    "Order managers": {"orders.return": ["view", "change"], "orders.returnline": ["view"]},
    "Stock managers": {"orders.return": ["view"], "orders.returnline": ["view"]},
}


class Migration(migrations.Migration):
    dependencies = [("shop", "0014_order_managers_handle_returns")]

    operations = [migrations.RunPython(_groups.revoker(GRANTS), _groups.granter(GRANTS))]
