from django.contrib.postgres.operations import ValidateConstraint
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("orders", "0015_discounts")]

    operations = [ValidateConstraint(model_name="orderitem", name="order_item_discount_within_line")]
