"""Discounts on orders. The line's CHECK is added NOT VALID here (a brief lock,
no scan) and validated by the next migration, in a transaction of its own that
does not block checkouts while it reads order_items."""

import django.db.models.expressions
from django.contrib.postgres.operations import AddConstraintNotValid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0014_alter_payment_outcome'),
        ('shop', '0010_stock_managers_run_promotions'),
    ]

    operations = [
        migrations.AddField(
            model_name='order',
            name='discounts',
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
        migrations.AddField(
            model_name='orderitem',
            name='discount',
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        AddConstraintNotValid(
            model_name='orderitem',
            constraint=models.CheckConstraint(condition=models.Q(('discount__gte', 0), ('discount__lte', django.db.models.expressions.CombinedExpression(models.F('quantity'), '*', models.F('unit_price')))), name='order_item_discount_within_line'),
        ),
    ]
