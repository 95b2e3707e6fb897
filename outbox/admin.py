from django.contrib import admin, messages

from core.admin import ReadOnlyAdmin
from outbox.models import OutboxEvent, ProcessedEvent
from outbox.tasks import publish_outbox_task


class PublishedFilter(admin.SimpleListFilter):
    title = "published"
    parameter_name = "published"

    def lookups(self, request, model_admin):
        return [("no", "Waiting"), ("yes", "Published")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(pending__isnull=self.value() == "yes")
        return queryset


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "event_type",
        "aggregate_type",
        "aggregate_id",
        "created_at",
        "published_at",
        "attempts",
        "last_error",
    ]
    list_filter = [PublishedFilter, "event_type"]
    search_fields = ["=aggregate_id", "=event_id"]
    actions = ["retry_now"]
    show_full_result_count = False

    @admin.action(description="Retry publishing now", permissions=["view"])
    def retry_now(self, request, queryset):
        waiting = queryset.filter(pending__isnull=False).update(last_error="retry requested by staff")
        publish_outbox_task.delay()
        self.message_user(request, f"{waiting} waiting event(s): the relay was asked to publish now.", messages.INFO)


@admin.register(ProcessedEvent)
class ProcessedEventAdmin(ReadOnlyAdmin):
    list_display = ["consumer", "event_type", "event_id", "processed_at"]
    list_filter = ["consumer", "event_type"]
    search_fields = ["=event_id"]
    show_full_result_count = False
