from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("orders", "0003_notification")]

    operations = [
        migrations.AlterField(model_name="payment", name="raw", field=models.TextField()),
        migrations.RenameField(model_name="payment", old_name="raw", new_name="raw_body"),
    ]
