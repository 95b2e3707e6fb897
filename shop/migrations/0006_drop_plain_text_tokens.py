"""DRF's authtoken table held every API token in plain text. Tokens are knox's
now (a digest and an expiry): the old table goes, and shoppers log in again."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("shop", "0005_product_price_at_most_max"), ("knox", "0009_extend_authtoken_field")]

    operations = [migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", migrations.RunSQL.noop)]
