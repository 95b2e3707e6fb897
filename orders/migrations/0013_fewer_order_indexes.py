"""Indexes every order and order line wrote and no query needed: the foreign keys'
own indexes on orders.customer_id and order_items.order_id (each the first column
of an index the tables already have) and the SKU's LIKE index. The SKU keeps a
plain index. Only the indexes are dropped: the foreign-key constraints stay as they
are (AlterField alone would drop and re-validate them on the whole table)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DROPPED = {
    "orders_customer_id_b7016332": 'ON "orders" ("customer_id")',
    "order_items_order_id_412ad78b": 'ON "order_items" ("order_id")',
    "order_items_sku_933eab1f": 'ON "order_items" ("sku")',
    "order_items_sku_933eab1f_like": 'ON "order_items" ("sku" varchar_pattern_ops)',
}


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0012_unpaid_holds"),
        ("shop", "0007_address_product_details"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [f'DROP INDEX IF EXISTS "{name}"' for name in DROPPED],
                    [f'CREATE INDEX IF NOT EXISTS "{name}" {target}' for name, target in DROPPED.items()],
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="order",
                    name="customer",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="orders",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="orderitem",
                    name="order",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="items",
                        to="orders.order",
                    ),
                ),
                migrations.AlterField(
                    model_name="orderitem",
                    name="product",
                    field=models.ForeignKey(
                        db_column="sku", db_index=False, on_delete=django.db.models.deletion.PROTECT,
                        related_name="+", to="shop.product",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="orderitem",
            index=models.Index(fields=["product"], name="order_item_sku"),
        ),
    ]
