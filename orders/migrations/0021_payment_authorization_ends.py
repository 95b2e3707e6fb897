"""Payments learn when their authorization ends (existing ones: 7 days after it
started, PAYMENT_AUTHORIZATION_DAYS' default); an order whose authorization lapsed
before its capture is PAYMENT_LAPSED, its payment LAPSED."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0020_order_tax_and_shipping'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='notification',
            name='kind',
            field=models.CharField(choices=[('order_confirmed', 'Order confirmed'), ('order_cancelled', 'Order cancelled'), ('refund_requested', 'Refund on its way'), ('order_shipped', 'Order shipped'), ('refund_completed', 'Refund completed'), ('payment_receipt', 'Payment receipt'), ('return_decided', 'Return approved or rejected'), ('return_received', 'Return received'), ('lines_cancelled', 'Lines removed from the order'), ('payment_requested', 'Asked to pay again')], max_length=20),
        ),
        migrations.RemoveConstraint(
            model_name='order',
            name='order_status_valid',
        ),
        migrations.RemoveConstraint(
            model_name='payment',
            name='payment_status_valid',
        ),
        migrations.RemoveConstraint(
            model_name='payment',
            name='payment_outcome_valid',
        ),
        migrations.AddField(
            model_name='payment',
            name='authorization_ends_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='payment',
            name='authorization_warned_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='order',
            name='status',
            field=models.CharField(choices=[('PENDING_PAYMENT', 'Pending payment'), ('PAID', 'Paid'), ('SHIPPED', 'Shipped'), ('CANCELLED', 'Cancelled'), ('REFUNDED', 'Refunded'), ('REJECTED', 'Rejected'), ('PAYMENT_LAPSED', 'Payment lapsed')], default='PENDING_PAYMENT', max_length=20),
        ),
        migrations.AlterField(
            model_name='payment',
            name='outcome',
            field=models.CharField(choices=[('applied', 'Paid the order'), ('refunded', 'Not applied, refunded'), ('voided', 'Not applied, voided'), ('failed', 'Payment failed'), ('lapsed', 'Paid the order, then lapsed')], max_length=10),
        ),
        migrations.AlterField(
            model_name='payment',
            name='status',
            field=models.CharField(choices=[('authorized', 'Authorized'), ('capturing', 'Capture requested'), ('captured', 'Captured'), ('voiding', 'Void requested'), ('voided', 'Voided'), ('refunded', 'Refunded'), ('failed', 'Failed'), ('lapsed', 'Authorization lapsed')], max_length=10),
        ),
        migrations.AddConstraint(
            model_name='order',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['PENDING_PAYMENT', 'PAID', 'SHIPPED', 'CANCELLED', 'REFUNDED', 'REJECTED', 'PAYMENT_LAPSED'])), name='order_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='payment',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['authorized', 'capturing', 'captured', 'voiding', 'voided', 'refunded', 'failed', 'lapsed'])), name='payment_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='payment',
            constraint=models.CheckConstraint(condition=models.Q(('outcome__in', ['applied', 'refunded', 'voided', 'failed', 'lapsed'])), name='payment_outcome_valid'),
        ),
        migrations.RunSQL(
            "UPDATE orders_payment SET authorization_ends_at = authorized_at + interval '7 days'"
            " WHERE authorized_at IS NOT NULL",
            migrations.RunSQL.noop,
        ),
        migrations.AddConstraint(
            model_name='payment',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('authorization_ends_at__isnull', True), ('authorized_at__isnull', True)), models.Q(('authorization_ends_at__gt', models.F('authorized_at')), ('authorized_at__isnull', False)), _connector='OR'), name='payment_authorization_ends_after_it_starts'),
        ),
        migrations.AddIndex(
            model_name='order',
            index=models.Index(condition=models.Q(('status', 'PAYMENT_LAPSED')), fields=['id'], name='order_payment_lapsed'),
        ),
        migrations.AddIndex(
            model_name='payment',
            index=models.Index(condition=models.Q(('status__in', ['authorized', 'capturing']), ('outcome', 'applied')), fields=['authorization_ends_at'], name='payment_held_ends_at'),
        ),
    ]
