"""Stock managers, who keep the catalog's prices, run its promotions and vouchers too."""

from django.db import migrations

from shop.migrations import _groups

GRANTS = {
    "Stock managers": {
        "shop.promotion": ["view", "add", "change", "delete"],
        "shop.voucherredemption": ["view"],
    },
}


class Migration(migrations.Migration):
    dependencies = [("shop", "0009_promotions_and_vouchers")]

    operations = [migrations.RunPython(_groups.granter(GRANTS), migrations.RunPython.noop)]
